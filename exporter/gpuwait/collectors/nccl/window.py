"""Window statistics of NCCL operations per rank, and the typed accessors the analysis reads
them through (A9, A10, A12).

NCCL Inspector times each operation by its kernels on the GPU (coll_timing_source kernel_gpu):
from the first channel's start to the last channel's end, waiting for the peers included. A
collective's execution time therefore covers both the transfer and the wait for the slowest
rank to arrive, and its bus bandwidth (NCCL's algorithm bandwidth times the collective's
correction factor, as nccl-tests defines it) falls with either. Which of the two it is shows
across the ranks of one communicator: a straggler's own collectives are short (the others
were already waiting for it), the waiting ranks' long; on a slow network all are long.

The plugin writes an operation when it completes, never while it runs: a collective that
does not end (a peer that never arrives, a link that went down) shows only as a rank whose
latest completion grows older while its kernel keeps the GPU busy.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

from gpuwait.collectors.nccl.payload import NcclData, NcclRank
from gpuwait.core.config import Settings
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import clamp_ratio, mean, total_increase, valid

#: (kind, comm, rank, pid, hostname, device_uuid, device): one series of one rank
Ident = tuple[str, str, int, int, str, str, int | None]

# Column keys are (kind of column, *Ident).
_OPS, _EXEC, _MSG, _BUS = "operations", "exec", "msg", "bus"
_COUNTERS = (_OPS, _EXEC, _MSG, _BUS)
#: Prometheus mode: the plugin's bus bandwidth gauge, bytes per second
_GAUGE = "gauge_bus"
#: seconds from the rank's latest completed operation to the read
_AGE = "age"
#: nodes the rank's communicator spans
_NODES = "nodes"
_KINDS = frozenset((*_COUNTERS, _GAUGE, _AGE, _NODES))


def ident(rank: NcclRank) -> Ident:
    return (rank.kind, rank.comm, rank.rank, rank.pid, rank.hostname, rank.device_uuid, rank.device)


def completion_age(data: NcclData, rank: NcclRank) -> float | None:
    """Seconds from the rank's latest completed operation (the time the plugin wrote it) to
    the read, both on the wall clock, so that it holds on whatever clock the Reading is
    replayed. Never negative: the writer's clock may be a little ahead."""
    if rank.last_unix is None or data.read_unix is None:
        return None
    return max(0.0, data.read_unix - rank.last_unix)


def columns(data: NcclData) -> dict[Hashable, float]:
    """Cumulative sums per rank (JSON mode) or the latest bus bandwidth gauge (Prometheus
    mode, which gives no counts); the age of each rank's latest completion and its
    communicator's node count."""
    cols: dict[Hashable, float] = {}
    for rank in data.ranks:
        key = ident(rank)
        if rank.collectives_total is not None:
            cols[(_OPS, *key)] = float(rank.collectives_total)
            cols[(_EXEC, *key)] = rank.exec_seconds_total
            cols[(_MSG, *key)] = rank.msg_bytes_total
            cols[(_BUS, *key)] = rank.bus_bytes_total
        elif rank.exec_seconds > 0:
            cols[(_GAUGE, *key)] = rank.bus_bytes / rank.exec_seconds
        age = completion_age(data, rank)
        if age is not None:
            cols[(_AGE, *key)] = age
        if rank.n_nodes is not None:
            cols[(_NODES, *key)] = float(rank.n_nodes)
    return cols


# -- what the verdict reads ------------------------------------------------------------------


class Rank(NamedTuple):
    """One rank of one communicator in one process, one kind of operation (collective or
    p2p), over the window. Counters are JSON mode only; ``bus_bandwidth`` is Prometheus mode
    only; their columns are NaN in the other mode."""

    kind: str
    comm: str
    #: -1 where the dump does not give it (Prometheus buckets)
    rank: int
    #: the writer's pid in its own pid namespace; 0 where the dump does not give it
    pid: int
    hostname: str
    #: the GPU's NVML UUID where the dump names it, else ""
    uuid: str
    #: the CUDA device ordinal the process used, where the dump gives it
    device: int | None
    #: operations completed, their execution time (seconds), message bytes and bus bytes
    #: (bus bandwidth times execution time), cumulative
    operations: Column
    exec_seconds: Column
    msg_bytes: Column
    bus_bytes: Column
    #: NCCL's bus bandwidth, bytes per second, as the plugin's latest gauge
    bus_bandwidth: Column
    #: seconds from the rank's latest completed operation to each read
    completion_age: Column
    #: nodes the communicator spans (more than one: its traffic crosses the network)
    nodes: Column

    @property
    def ident(self) -> Ident:
        return (self.kind, self.comm, self.rank, self.pid, self.hostname, self.uuid, self.device)


def ranks(view: WindowView) -> list[Rank]:
    """Every rank of the window."""
    idents = sorted({k[1:] for k in view.columns if isinstance(k, tuple) and len(k) == 8 and k[0] in _KINDS},
                    key=repr)
    return [Rank(*key, *(view.series((name, *key)) for name in (*_COUNTERS, _GAUGE, _AGE, _NODES)))
            for key in idents]


def n_nodes(rank: Rank) -> int | None:
    """Nodes the rank's communicator spans, as of its latest read that says."""
    known = valid(rank.nodes.values)
    return int(known[-1]) if known else None


class Activity(NamedTuple):
    """What a rank's operations did over the window: increases of its counters (a rank
    restarted mid-window counts from its new totals) and the time they cover."""

    operations: float
    exec_seconds: float
    msg_bytes: float
    bus_bytes: float
    seconds: float


def activity(rank: Rank) -> Activity | None:
    """None without counts: Prometheus mode, or a rank read once."""
    covered = total_increase(rank.operations.times, rank.operations.values)
    if covered is None:
        return None
    sums = []
    for column in (rank.exec_seconds, rank.msg_bytes, rank.bus_bytes):
        increase = total_increase(column.times, column.values)
        sums.append(increase[0] if increase is not None else 0.0)
    return Activity(covered[0], *sums, covered[1])


def exec_share(rank: Rank) -> float | None:
    """Share of the window the rank's operations ran on the GPU: the transfer and the wait
    for the peers together, which NCCL's kernel timing does not separate (JSON mode)."""
    done = activity(rank)
    if done is None or done.seconds <= 0:
        return None
    return clamp_ratio(done.exec_seconds / done.seconds)


def bus_bytes_per_second(rank: Rank) -> float | None:
    """NCCL's bus bandwidth of the rank's operations over the window, weighted by their
    execution time (Prometheus mode: the mean of the plugin's gauge)."""
    done = activity(rank)
    if done is not None:
        return done.bus_bytes / done.exec_seconds if done.exec_seconds > 0 else None
    return mean(rank.bus_bandwidth.values)


def seconds_since_completion(rank: Rank, at: float | None = None) -> float | None:
    """Seconds from the rank's latest completed operation to ``at`` (the window's end by
    default), from its latest read that knew it."""
    times, ages = rank.completion_age.times, rank.completion_age.values
    for t, age in zip(reversed(times), reversed(ages)):
        if age == age:
            end = at if at is not None else times[-1]
            return age + max(0.0, end - t)
    return None


def completion_interval(rank: Rank) -> float | None:
    """Mean seconds between the rank's completed operations over the window; None when
    none completed in it (or without counts)."""
    done = activity(rank)
    if done is None or done.operations <= 0:
        return None
    return done.seconds / done.operations


def stalled(rank: Rank, intervals: float, at: float | None = None) -> bool:
    """Whether the rank has completed nothing for longer than ``intervals`` times its mean
    interval between completions over the window, or for the whole window after completing
    operations before it: an operation that does not end. JSON mode only (False otherwise).
    That its process still runs on the GPU is the caller's to check: a job's file outlives
    its end until collector.nccl.stale-after."""
    age = seconds_since_completion(rank, at)
    done = activity(rank)
    if age is None or done is None:
        return False
    if done.operations <= 0:
        return age >= done.seconds
    return age > intervals * done.seconds / done.operations


# -- window statistics (metrics) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankWindow:
    """One rank's operations over the window. Counts and sums are None in Prometheus mode."""

    operations: float | None
    exec_seconds: float | None
    msg_bytes: float | None
    bus_bytes: float | None
    #: the time the increases cover
    seconds: float | None
    #: bus bytes per second of execution time: NCCL's bus bandwidth, averaged by time
    bus_bytes_per_second: float | None
    #: share of the window the rank's operations ran (kernels on the GPU, waits included)
    exec_ratio: float | None


@dataclass(frozen=True, slots=True)
class NcclStats:
    ranks: dict[Ident, RankWindow]


def rank_window(rank: Rank) -> RankWindow | None:
    done = activity(rank)
    if done is not None:
        return RankWindow(done.operations, done.exec_seconds, done.msg_bytes, done.bus_bytes, done.seconds,
                          bus_bytes_per_second(rank), exec_share(rank))
    gauge = bus_bytes_per_second(rank)
    return RankWindow(None, None, None, None, None, gauge, None) if gauge is not None else None


def summarize(view: WindowView, settings: Settings) -> NcclStats:
    windows = {rank.ident: rank_window(rank) for rank in ranks(view)}
    return NcclStats({key: window for key, window in windows.items() if window is not None})


def since(view: WindowView | None, t: float) -> WindowView | None:
    """The reads of ``view`` from the last one before ``t`` on: their counters' increases
    cover the time from ``t`` to the end."""
    if view is None:
        return None
    first = max(0, next((i for i, x in enumerate(view.times) if x >= t), len(view.times)) - 1)
    return WindowView(list(view.times[first:]), {key: list(view.column(key))[first:] for key in view.columns})
