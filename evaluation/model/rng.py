"""Deterministic random streams: one per model part, derived from the scenario seed and the
part's name, so adding a part never changes the draws of another and a trace is the same
on every run and every Python (str hashing is salted per process, sha256 is not)."""

from __future__ import annotations

import hashlib
import math
import random


def stream(seed: int, *names: object) -> random.Random:
    digest = hashlib.sha256(repr((seed,) + names).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def lognormal(rng: random.Random, mean: float, cv: float) -> float:
    """A positive draw with the given mean and coefficient of variation (service times and
    per-step compute jitter are right-skewed, never negative)."""
    if cv <= 0:
        return mean
    sigma2 = math.log(1.0 + cv * cv)
    return mean * math.exp(rng.gauss(-sigma2 / 2.0, math.sqrt(sigma2)))
