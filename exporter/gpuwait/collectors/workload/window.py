"""Window statistics of instrumented loops, per owner: the share of loop time spent waiting
for data (A8), computing and communicating, the step time, the throughput, the request rate
(A13), and how far the throughput fell against the owner's own earlier rate (A1).

Each process's counters are kept in their own columns and turned into increases per process,
then summed per owner: a rank that exits or restarts resets only its own counters.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from gpuwait.collectors.workload.payload import WorkloadData
from gpuwait.core.config import Option, Settings, parse_duration
from gpuwait.core.ring import WindowView
from gpuwait.core.series import total_increase

RECENT = Option("collector.workload.recent", parse_duration, 15.0,
                "Latest part of the window whose throughput is compared with the rest of it to detect a drop.", "DURATION")

COUNTERS = ("data", "compute", "comm", "steps", "samples", "requests")


def columns(data: WorkloadData) -> dict[Hashable, float]:
    cols: dict[Hashable, float] = {}
    for owned in data.records:
        r = owned.record
        ident = (owned.owner, r.kind, owned.key)
        cols[("data",) + ident] = r.data_seconds
        cols[("compute",) + ident] = r.compute_seconds
        cols[("comm",) + ident] = r.comm_seconds
        cols[("steps",) + ident] = float(r.steps)
        cols[("samples",) + ident] = float(r.samples)
        cols[("requests",) + ident] = float(r.requests)
    return cols


@dataclass(frozen=True, slots=True)
class OwnerWorkload:
    owner: str
    #: "training" or "inference" ("inference" if any of the owner's processes says so)
    kind: str
    processes: int
    #: shares of the instrumented loop time over the window (None without any loop time)
    data_wait_ratio: float | None
    compute_ratio: float | None
    comm_ratio: float | None
    #: loop time per step, averaged over the owner's processes
    step_seconds: float | None
    steps_per_second: float
    samples_per_second: float
    requests_per_second: float
    #: 1 - (rate over collector.workload.recent) / (rate over the rest of the window), in 0..1,
    #: of samples (steps when no samples are counted); None without an earlier rate
    throughput_drop_ratio: float | None
    #: seconds per second each of its processes spent inside its loop (an inference server's
    #: wait for the next request is outside it), None without loop time
    loop_ratio: float | None = None

    @property
    def demand(self) -> bool:
        """Whether the loop had work: an inference server that accepted requests, a training
        loop that moved through its steps or waited for data to do so (A1, A13)."""
        if self.kind == "inference":
            return self.requests_per_second > 0
        return self.steps_per_second > 0 or (self.data_wait_ratio or 0.0) > 0


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    owners: dict[str, OwnerWorkload]


def _increase(view: WindowView, key, since: float | None = None, until: float | None = None) -> tuple[float, float] | None:
    times, values = view.times, view.column(key)
    if since is not None or until is not None:
        lo, hi = since if since is not None else float("-inf"), until if until is not None else float("inf")
        pairs = [(t, v) for t, v in zip(times, values) if lo <= t <= hi]
        times, values = [p[0] for p in pairs], [p[1] for p in pairs]
    return total_increase(times, values)


def summarize(view: WindowView, settings: Settings) -> WorkloadStats:
    groups: dict[str, dict[str, set[str]]] = {}
    for key in view.columns:
        if isinstance(key, tuple) and len(key) == 4 and key[0] == "data":
            _, owner, kind, ident = key
            groups.setdefault(owner, {}).setdefault(kind, set()).add(ident)
    end = view.times[-1] if view.times else 0.0
    split = end - settings[RECENT]
    owners = {}
    for owner, kinds in sorted(groups.items()):
        idents = [(kind, ident) for kind, ids in sorted(kinds.items()) for ident in sorted(ids)]
        seconds = dict.fromkeys(("data", "compute", "comm"), 0.0)
        rates = dict.fromkeys(("steps", "samples", "requests"), 0.0)
        steps = 0.0
        processes = 0
        for kind, ident in idents:
            counted = False
            for name in seconds:
                inc = _increase(view, (name, owner, kind, ident))
                if inc is not None:
                    seconds[name] += inc[0]
                    counted = True
            for name in rates:
                inc = _increase(view, (name, owner, kind, ident))
                if inc is not None:
                    rates[name] += inc[0]
                    if name == "steps":
                        steps += inc[0]
            processes += counted
        # The owner's throughput over the whole window: a rank that exited mid-window
        # contributes what it did while it ran, not its rate as if it still ran.
        span = view.times[-1] - view.times[0] if len(view.times) > 1 else 0.0
        rates = {name: (total / span if span > 0 else 0.0) for name, total in rates.items()}
        loop = sum(seconds.values())
        owners[owner] = OwnerWorkload(
            owner=owner,
            kind="inference" if "inference" in kinds else "training",
            processes=processes,
            data_wait_ratio=seconds["data"] / loop if loop > 0 else None,
            compute_ratio=seconds["compute"] / loop if loop > 0 else None,
            comm_ratio=seconds["comm"] / loop if loop > 0 else None,
            step_seconds=loop / steps if steps > 0 else None,
            steps_per_second=rates["steps"],
            samples_per_second=rates["samples"],
            requests_per_second=rates["requests"],
            throughput_drop_ratio=_drop(view, owner, idents, split) if view.times and split > view.times[0] else None,
            loop_ratio=min(1.0, loop / (span * processes)) if loop > 0 and span > 0 and processes else None,
        )
    return WorkloadStats(owners)


def _drop(view: WindowView, owner: str, idents, split: float) -> float | None:
    start, end = view.times[0], view.times[-1]
    if end <= split:
        return None
    for counter in ("samples", "steps"):
        earlier = later = 0.0
        for kind, ident in idents:
            key = (counter, owner, kind, ident)
            before = _increase(view, key, until=split)
            after = _increase(view, key, since=split)
            earlier += before[0] if before is not None else 0.0
            later += after[0] if after is not None else 0.0
        if earlier > 0:
            rate_before, rate_after = earlier / (split - start), later / (end - split)
            return min(1.0, max(0.0, 1.0 - rate_after / rate_before))
    return None
