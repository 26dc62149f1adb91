"""Window statistics of NFS mounts: per-operation rate and mean latency, and the share of
metadata operations (A6, A7).

The kernel's counters are cumulative since mount, so "how slow is a READ right now" is the
increase of execution time over the increase of operations within the window, not the
lifetime ratio, which a long-lived mount would pin to its history.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

from gpuwait.collectors.nfs.payload import NfsData
from gpuwait.core.config import Settings
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import increase, total_increase

# Column keys: (kind, mount) for the totals, (kind, mount, op) per operation.
_ALL, _META, _OPS, _EXEC = "all", "meta", "ops", "exec"


def columns(data: NfsData) -> dict[Hashable, float]:
    cols: dict[Hashable, float] = {}
    for mount, stats in data.mounts.items():
        cols[(_ALL, mount)] = float(stats.all_ops)
        cols[(_META, mount)] = float(stats.metadata_ops)
        for op, c in stats.ops.items():
            cols[(_OPS, mount, op)] = float(c.ops)
            # milliseconds as printed: the division into seconds is done once, in summarize
            cols[(_EXEC, mount, op)] = float(c.execute_ms)
    return cols


@dataclass(frozen=True, slots=True)
class NfsWindowStats:
    #: (mount, op) -> operations per second over the window
    op_rate: dict[tuple[str, str], float]
    #: (mount, op) -> mean execution time of one operation (queue + round trip + client
    #: processing), seconds; absent when the window saw no such operation
    op_execute_mean_seconds: dict[tuple[str, str], float]
    #: mount -> metadata operations / all operations over the window; absent when idle
    metadata_ratio: dict[str, float]


def summarize(view: WindowView, settings: Settings) -> NfsWindowStats:
    rates: dict[tuple[str, str], float] = {}
    latency: dict[tuple[str, str], float] = {}
    metadata: dict[str, float] = {}
    for key in view.columns:
        if not isinstance(key, tuple):
            continue
        if key[0] == _OPS:
            _, mount, op = key
            ops = total_increase(view.times, view.columns[key])
            if ops is None:
                continue
            rates[(mount, op)] = ops[0] / ops[1]
            execute_ms, count = paired_increase(view.column((_EXEC, mount, op)), view.columns[key])
            if count > 0:
                latency[(mount, op)] = execute_ms / 1000.0 / count
        elif key[0] == _ALL:
            mount = key[1]
            meta, every = paired_increase(view.column((_META, mount)), view.columns[key])
            if every > 0:
                # at most 1: the metadata operations are a subset of all, counted from one read
                metadata[mount] = meta / every
    return NfsWindowStats(rates, latency, metadata)


def paired_increase(numerator: list[float], denominator: list[float]) -> tuple[float, float]:
    """Increases of two counters summed over the same intervals: an interval in which either
    went backwards (a remount) is skipped for both, so the ratio never mixes two mounts."""
    num_sum = den_sum = 0.0
    prev_num = prev_den = None
    for num, den in zip(numerator, denominator):
        if num != num or den != den:  # NaN: not sampled
            continue
        if prev_num is not None:
            dn = increase(prev_num, num)
            dd = increase(prev_den, den)
            if dn is not None and dd is not None:
                num_sum += dn
                den_sum += dd
        prev_num, prev_den = num, den
    return num_sum, den_sum


# -- what the verdict reads ------------------------------------------------------------------


class Operation(NamedTuple):
    """One RPC procedure of one mount over the window."""

    op: str
    #: Operations completed since mount.
    count: Column
    #: Milliseconds from start to completion, summed over the operations, since mount.
    execute_ms: Column


def mounts(view: WindowView) -> list[str]:
    return sorted({k[1] for k in view.columns if isinstance(k, tuple) and k[0] == _OPS})


def operations(view: WindowView, mount: str) -> list[Operation]:
    """The mount's selected operations (collector.nfs.ops), in column order."""
    return [Operation(k[2], view.series(k), view.series((_EXEC,) + k[1:]))
            for k in view.columns if isinstance(k, tuple) and k[0] == _OPS and k[1] == mount]
