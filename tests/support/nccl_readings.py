"""nccl Readings built by hand, for the window statistics and the join of ranks to GPUs: a
rank's cumulative sums as the source would have them after so many reads."""

from __future__ import annotations

from gpuwait.collectors.nccl.payload import NcclData, NcclRank
from gpuwait.collectors.nccl.window import columns
from gpuwait.core.reading import Reading
from gpuwait.core.ring import ColumnRing, WindowView

#: The wall clock at monotonic 100 (the first read of ``steady``).
WALL = 1_764_081_000.0


def rank(comm="0xa", rank=0, pid=4242, n_nodes=1, ops=0, exec_s=0.0, bus=0.0, last=None, device=None,
         hostname="hgx-a17", **kw) -> NcclRank:
    """A JSON-mode rank whose cumulative sums are ``ops``, ``exec_s`` and ``bus``; ``last``
    is its latest operation's wall time."""
    return NcclRank(comm=comm, rank=rank, n_ranks=8, n_nodes=n_nodes, pid=pid, hostname=hostname, device=device,
                    collectives=0, exec_seconds=0.0, max_exec_seconds=0.0, msg_bytes=0.0, bus_bytes=0.0,
                    last_seq=None, last_unix=last, collectives_total=ops, exec_seconds_total=exec_s,
                    msg_bytes_total=ops * 1e6, bus_bytes_total=bus, **kw)


def gauge_rank(uuid="", device=None, bw=300e9, exec_s=0.01, last=None) -> NcclRank:
    """A Prometheus-mode rank: gauges only."""
    return NcclRank(comm="DP Group 0", rank=-1, n_ranks=4, n_nodes=1, pid=0, hostname="hgx-a17", device=device,
                    collectives=None, exec_seconds=exec_s, max_exec_seconds=exec_s, msg_bytes=4e9,
                    bus_bytes=bw * exec_s, last_seq=None, last_unix=last, device_uuid=uuid)


def reading_at(t, *ranks) -> Reading:
    """A read at monotonic ``t``, when the wall clock said WALL + (t - 100)."""
    return Reading("nccl", t, NcclData(ranks=tuple(ranks), read_unix=WALL + t - 100.0))


def steady(seconds=10, last=None, **kw) -> list[Reading]:
    """One rank doing 20 collectives a second of 10 ms each at 200 GB/s bus bandwidth, read
    every second from monotonic 100, each read just after its latest collective (or with
    the latest at wall time ``last``)."""
    return [reading_at(100.0 + s, rank(ops=20 * s, exec_s=0.2 * s, bus=0.2 * s * 200e9,
                                       last=WALL + s if last is None else last, **kw))
            for s in range(seconds + 1)]


def view_of(readings) -> WindowView:
    ring = ColumnRing(100)
    for reading in readings:
        ring.append(reading.t, columns(reading.data))
    return ring.view()
