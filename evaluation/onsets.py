"""How the verdict follows an onset: from a GPU's verdict after every analysis pass, the
verdict it had when the mechanism began, how long after it the verdict first became one the
truth accepts, and when it settled there for good; each delay counted from the mechanism's
onset and from the GPU's impact, the first second the model shows the GPU affected (see
``truth.Meter.impact``): a mechanism behind a buffer reaches the GPU later than it begins."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from evaluation.truth import accepted

#: the share of onsets whose right verdict should come within this many seconds
PROMPT_SECONDS = 15.0


@dataclass
class Followed:
    gpu: int
    before: str
    after: str
    #: the verdict of the last analysis pass at or before the onset
    at_onset: str | None
    before_right: bool
    #: seconds from the onset to the first accepted verdict; None: never
    first_right: float | None
    #: seconds from the onset to the verdict that is accepted and unchanged to the end; None: never
    settled: float | None
    #: the verdict of the last analysis pass
    final: str | None
    #: verdicts given after the onset that the truth after it does not accept, with their counts
    wrong_after: dict[str, int] = field(default_factory=dict)
    #: seconds from the onset to the GPU's first affected second; None: never affected
    impact: float | None = 0.0

    @property
    def first_right_after_impact(self) -> float | None:
        return _since(self.first_right, self.impact)

    @property
    def settled_after_impact(self) -> float | None:
        return _since(self.settled, self.impact)

    @property
    def changes(self) -> bool:
        """Whether the truth changes at the onset (else the GPU is a look-alike's or a bystander's)."""
        return self.before != self.after

    def to_json(self) -> dict:
        return {**asdict(self), "changes": self.changes}


def _since(delay: float | None, impact: float | None) -> float | None:
    """A delay from the onset counted from the impact instead; a verdict already right at the
    impact is right at once. A GPU never affected keeps the delay from the onset."""
    if delay is None or impact is None:
        return delay
    return max(0.0, delay - impact)


def follow(gpu: int, series: list[tuple[float, str]], onset: float, before: str, after: str,
           impact: float | None = 0.0) -> Followed:
    pre = [v for t, v in series if t <= onset]
    post = [(t, v) for t, v in series if t > onset]
    at_onset = pre[-1] if pre else None
    first = next((t - onset for t, v in post if accepted(after, v)), None)
    settled = None
    if post and accepted(after, post[-1][1]):
        start = post[-1][0]
        for t, v in reversed(post):
            if not accepted(after, v):
                break
            start = t
        settled = start - onset
    wrong: dict[str, int] = {}
    for _, v in post:
        if not accepted(after, v):
            wrong[v] = wrong.get(v, 0) + 1
    return Followed(gpu, before, after, at_onset, at_onset is not None and accepted(before, at_onset), first, settled,
                    post[-1][1] if post else None, wrong, impact)


def percentile(values: list[float | None], q: float) -> float | None:
    """Nearest-rank percentile, a value of None (never) counting as larger than every other;
    None when the rank falls on one."""
    if not values:
        return None
    ranked = sorted(values, key=lambda v: math.inf if v is None else v)
    return ranked[max(0, math.ceil(q * len(ranked)) - 1)]


def delays(rows: list[Followed], which: str = "first_right") -> dict:
    """Median, p90 and the share within PROMPT_SECONDS of one delay over the GPUs whose truth
    changes at the onset."""
    values = [getattr(r, which) for r in rows if r.changes]
    within = sum(1 for v in values if v is not None and v <= PROMPT_SECONDS)
    return {"gpus": len(values), "never": sum(1 for v in values if v is None),
            "median_seconds": percentile(values, 0.5), "p90_seconds": percentile(values, 0.9),
            "within_seconds": PROMPT_SECONDS, "within_share": within / len(values) if values else None}


def fmt_seconds(x: float | None) -> str:
    return "never" if x is None else f"{x:.0f} s"
