"""Storage evidence: reads in flight while tasks stall on IO, a long disk queue, or a slow
NFS server (A6, A7).

Reading must be going on (disk reads or NFS read-path operations at a real rate); then any
of: IO pressure (PSI io some) at the threshold, or without PSI a task in uninterruptible
sleep; an average disk queue at the threshold; NFS operations slower than the threshold; or
NFS callers that wait on the server all the time.

The last one is needed because an NFS client's tasks wait for their RPCs in
rpc_wait_bit_killable, not in io_schedule: PSI does not count them as IO stalls, so a reader
bound by the round trips of many fast operations (a LOOKUP, OPEN and GETATTR of 2 ms each
before every small file) shows neither IO pressure nor a slow operation. By Little's law the
execute time its operations accumulate per second is the mean number of tasks waiting on the
server; one or more means some task of the node waits on the mount at every instant. Whose
tasks they are is settled by the owner scope (analysis.verdict: the owner's threads seen in
uninterruptible sleep), as for every host-wide IO sign.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from itertools import compress, repeat
from operator import and_, ge, or_

from gpuwait.analysis.timeseries import HOLD_INTERVALS, Grid, interval_marks
from gpuwait.collectors.cpu import window as cpu_window
from gpuwait.collectors.diskstats import window as disk_window
from gpuwait.collectors.nfs import window as nfs_window
from gpuwait.collectors.pressure import window as pressure_window
from gpuwait.core.config import Option, Settings, parse_fraction, parse_positive
from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.ring import WindowView

IO_PRESSURE = Option("verdict.storage.io-pressure", parse_fraction, 0.1,
                     "IO pressure (PSI io some) at which tasks count as stalled on storage.")
QUEUE_DEPTH = Option("verdict.storage.queue-depth", parse_positive, 4.0,
                     "Average in-flight requests on a disk that count as a long queue.")
MIN_READ_IOPS = Option("verdict.storage.min-read-iops", parse_positive, 20.0,
                       "Reads per second (disk or NFS read-path operations) below which nothing is being read; checkpoint writes are not a data-pipeline wait.")
NFS_LATENCY = Option("verdict.storage.nfs-latency", parse_positive, 0.005,
                     "Mean NFS operation execute time, in seconds, that counts as a slow remote file system.")
NFS_WAITERS = Option("verdict.storage.nfs-waiters", parse_positive, 1.0,
                     "Mean number of tasks waiting on an NFS mount's server (execute seconds of its operations per "
                     "second, Little's law) at which its readers count as stalled on it.")

OWNER_READ_BYTES = Option("verdict.storage.owner-read-bytes", parse_positive, 1048576.0,
                          "Bytes per second an owner's processes must read from block devices over the window "
                          "(/proc/<pid>/io read_bytes) for the host's storage stall to count as theirs when none of "
                          "their threads was seen blocked in D state.")

OPTIONS = (IO_PRESSURE, QUEUE_DEPTH, MIN_READ_IOPS, NFS_LATENCY, NFS_WAITERS, OWNER_READ_BYTES)

#: A disk's marks on a sampling interval: reads at a real rate, and a long queue while reading.
READING, LONG_QUEUE = 1, 2
#: An NFS mount's other mark, beside READING: slow operations, or callers waiting on the
#: server all the time.
SLOW = 2


def storage(inputs: AnalysisInputs, grid: Grid, settings: Settings, gap: float) -> list[bool]:
    """Storage evidence at each grid point; ``gap`` is the longest sampling interval a
    fast-tier rate may span."""
    n = len(grid)
    reading = [False] * n
    long_queue = [False] * n
    disks = inputs.views.get("diskstats")
    if disks is not None:
        min_iops, depth = settings[MIN_READ_IOPS], settings[QUEUE_DEPTH]

        def reads(rates: list[float]) -> int:
            read_rate, queue = rates
            return (READING | LONG_QUEUE if queue >= depth else READING) if read_rate >= min_iops else 0

        marks, others = disk_marks(disks, grid, ("reads", "queue_time"), ("storage", min_iops, depth), reads, gap)
        if marks is not None:
            reading = [bool(m & READING) for m in marks]
            long_queue = [bool(m & LONG_QUEUE) for m in marks]
        for device in others:
            counters = disk_window.device_counters(disks, device)
            # A comparison with NaN is false: an instant without a rate is not reading.
            busy = list(map(ge, grid.rates(counters.reads, gap), repeat(min_iops)))
            if not any(busy):
                continue
            reading = list(map(or_, reading, busy))
            queued = map(ge, grid.rates(counters.queue_time, gap), repeat(depth))
            long_queue = list(map(or_, long_queue, map(and_, busy, queued)))
    slow_nfs = _nfs_slow(inputs, grid, settings, reading)
    psi = inputs.views.get("pressure")
    io_some = pressure_window.stalled_seconds(psi, "io", "some") if psi is not None else None
    if io_some is not None:
        level = settings[IO_PRESSURE]
        stalled = [p == p and p >= level for p in grid.rates(io_some, gap)]
    else:
        cpu = inputs.views.get("cpu")
        blocked = grid.hold(cpu_window.procs_blocked(cpu)) if cpu is not None else [math.nan] * n
        stalled = [b == b and b >= 1 for b in blocked]
    return [reading[i] and (stalled[i] or long_queue[i] or slow_nfs[i]) for i in range(n)]


def disk_marks(disks: WindowView, grid: Grid, counters: tuple[str, ...], name: Hashable,
               judge: Callable[[list[float]], int], gap: float) -> tuple[list[int] | None, list[str]]:
    """The marks ``judge`` sets per grid point from the rates of ``counters`` (DeviceCounters'
    field names) of every disk it can judge interval by interval, each interval once
    (``interval_marks``, its memo named by ``name``); and the disks left to judge on the grid:
    those whose counters are not steady (a disk that appeared, was reset or skipped a read),
    or every disk where the grid cannot look its intervals up. Marks are None where no disk
    was judged by interval."""
    steady, others = [], []
    for device in disk_window.devices(disks):
        keys = disk_window.steady_counters(disks, device, *counters)
        if keys is not None:
            steady.append(keys)
        else:
            others.append(device)
    if not steady:
        return None, others
    marks = grid.on_intervals(disks.times, interval_marks(disks, name, steady, judge, gap))
    if marks is None:
        others += [keys[0][1] for keys in steady]
    return marks, others


def _nfs_slow(inputs: AnalysisInputs, grid: Grid, settings: Settings, reading: list[bool]) -> list[bool]:
    """Marks NFS read-path activity in ``reading`` and returns where it was slow or kept its
    callers waiting. NFS is read on the slow tier, so its rates cover whole slow intervals."""
    view = inputs.views.get("nfs")
    n = len(grid)
    slow = [False] * n
    if view is None:
        return slow
    gap = HOLD_INTERVALS * settings.slow_interval
    min_ops, latency, waiters = settings[MIN_READ_IOPS], settings[NFS_LATENCY], settings[NFS_WAITERS]

    def marks(total_ops: list[float], total_ms: list[float]) -> list[int]:
        out = []
        for ops, ms in zip(total_ops, total_ms):
            mark = 0
            if ops >= min_ops:
                mark = READING
                # execute seconds per second: the mean number of callers waiting on the server
                waiting = ms / 1000.0
                if waiting / ops >= latency or waiting >= waiters:
                    mark |= SLOW
            out.append(mark)
        return out

    for mount in nfs_window.mounts(view):
        operations = nfs_window.operations(view, mount)
        # NFS is read every slow interval, a dozen rows a window: where every operation's
        # counters have all of them, each interval is added up and judged once, and its marks
        # put on the instants it covers, as they would have been judged one by one.
        per_interval = [(grid.interval_rates(op.count, gap), grid.interval_rates(op.execute_ms, gap))
                        for op in operations]
        shared = all(o is not None and m is not None and op.count.times is view.times and op.execute_ms.times is view.times
                     for (o, m), op in zip(per_interval, operations))
        on_grid = None
        if shared:
            intervals = len(view.times) - 1
            total_ops, total_ms = _added(per_interval, intervals)
            on_grid = grid.on_intervals(view.times, marks(total_ops, total_ms))
        if on_grid is None:
            total_ops, total_ms = _added([(grid.rates(op.count, gap), grid.rates(op.execute_ms, gap)) for op in operations], n)
            on_grid = marks(total_ops, total_ms)
        for i in compress(range(n), on_grid):
            reading[i] = True
            if on_grid[i] & SLOW:
                slow[i] = True
    return slow


def _added(rates: list[tuple[list[float], list[float]]], n: int) -> tuple[list[float], list[float]]:
    """The operations' rates and execute milliseconds per second added up at each of ``n``
    instants (or intervals), an operation's where it has both (x == x: not NaN)."""
    total_ops = [0.0] * n
    total_ms = [0.0] * n
    for ops, ms in rates:
        total_ops = [t + o if o == o and m == m else t for t, o, m in zip(total_ops, ops, ms)]
        total_ms = [t + m if o == o and m == m else t for t, o, m in zip(total_ms, ops, ms)]
    return total_ops, total_ms
