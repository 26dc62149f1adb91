"""The scenarios: steady ones (the verdict at the end of an 80 s trace) and onset ones (a
165 s trace that runs healthy until a mechanism begins at a known time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evaluation.truth import GpuTruth

#: model time run before recording starts, so queues, prefetch and temperatures settle
WARMUP = 10.0


@dataclass
class Check:
    """A physics expectation the truth rests on, checked on the model (tests/evaluation):
    ``metric`` of each GPU in ``gpus`` lies in [lo, hi] over ``window``."""

    gpus: tuple[int, ...]
    metric: str
    lo: float
    hi: float
    window: str = "scored"


@dataclass
class Built:
    node: object
    #: the expected verdicts at the end of the trace
    truth: dict[int, GpuTruth]
    #: onset scenarios: the expected verdicts just before the onset
    before: dict[int, GpuTruth] | None = None
    #: onset scenarios: what changes at the onset
    onset_action: Callable[[], None] | None = None


@dataclass
class Scenario:
    name: str
    title: str
    build: Callable[[int], Built]
    kind: str = "steady"
    duration: float = 75.0
    onset: float | None = None
    claims: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    #: the set's grouping in docs/evaluation.md
    family: str = ""
    story: str = ""


REGISTRY: dict[str, Scenario] = {}


def register(s: Scenario) -> Scenario:
    if s.name in REGISTRY:
        raise ValueError(f"scenario {s.name!r} defined twice")
    if s.kind == "onset" and s.onset is None:
        raise ValueError(f"onset scenario {s.name!r} needs its onset time")
    REGISTRY[s.name] = s
    return s


def all_scenarios() -> dict[str, Scenario]:
    from evaluation.scenarios import onset, steady  # noqa: F401  (they register)

    return REGISTRY


def select(names: str | None = None, kind: str | None = None) -> list[Scenario]:
    scenarios = all_scenarios()
    chosen = list(scenarios.values())
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in scenarios]
        if unknown:
            raise KeyError(f"unknown scenario(s): {', '.join(unknown)}")
        chosen = [scenarios[n] for n in wanted]
    if kind:
        chosen = [s for s in chosen if s.kind == kind]
    return chosen


__all__ = ["Built", "Check", "Scenario", "REGISTRY", "all_scenarios", "register", "select", "field"]


def check_failures(scenario: Scenario, truth: dict) -> list[str]:
    """The checks of ``scenario`` that the generated ``truth`` (its measured physics) fails."""
    out = []
    for c in scenario.checks:
        for gpu in c.gpus:
            entry = truth["gpus"][gpu]
            physics = entry[c.window]["physics"] if scenario.kind == "onset" else entry["physics"]
            value = physics
            for part in c.metric.split("."):
                value = value.get(part, 0.0) if isinstance(value, dict) else None
            if value is None or not (c.lo <= value <= c.hi):
                out.append(f"{scenario.name} GPU {gpu}: {c.metric} = {value} not in [{c.lo}, {c.hi}] ({c.window})")
    return out
