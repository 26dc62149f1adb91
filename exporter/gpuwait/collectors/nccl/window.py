"""Window statistics of NCCL operations per rank, and the join of ranks to the GPUs they ran
on (A9, A10, A12).

NCCL Inspector times each operation by its kernels on the GPU (coll_timing_source kernel_gpu):
from the first channel's start to the last channel's end, waiting for the peers included. A
collective's execution time therefore covers both the transfer and the wait for the slowest
rank to arrive, and its bus bandwidth (NCCL's algorithm bandwidth times the collective's
correction factor, as nccl-tests defines it) falls with either. Which of the two it is shows
across the ranks of one communicator: a straggler's own collectives are short (the others
were already waiting for it), the waiting ranks' long; on a slow network all are long.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwait.collectors.nccl.payload import NcclData, NcclRank
from gpuwait.config import Settings
from gpuwait.reading import Reading
from gpuwait.ring import WindowView
from gpuwait.stats.series import clamp_ratio, mean, total_increase
from gpuwait.topology import RELATIONS

if TYPE_CHECKING:  # the payloads of other collectors' sources, read here but not built
    from gpuwait.sources.gpu import GpuDeviceData
    from gpuwait.sources.rdma import RdmaData

#: (kind, comm, rank, pid, hostname, device_uuid, device): one series of one rank
Ident = tuple[str, str, int, int, str, str, int | None]

_COUNTERS = ("operations", "exec", "msg", "bus")
_GAUGE = "gauge_bus"
#: InfiniBand port state ACTIVE (IBTA PortInfo:PortState 4, sysfs "4: ACTIVE")
PORT_ACTIVE = 4


def ident(rank: NcclRank) -> Ident:
    return (rank.kind, rank.comm, rank.rank, rank.pid, rank.hostname, rank.device_uuid, rank.device)


def columns(data: NcclData) -> dict[Hashable, float]:
    """Cumulative sums per rank (JSON mode), or the latest bus bandwidth gauge (Prometheus
    mode, which gives no counts)."""
    cols: dict[Hashable, float] = {}
    for rank in data.ranks:
        key = ident(rank)
        if rank.collectives_total is not None:
            cols[("operations", *key)] = float(rank.collectives_total)
            cols[("exec", *key)] = rank.exec_seconds_total
            cols[("msg", *key)] = rank.msg_bytes_total
            cols[("bus", *key)] = rank.bus_bytes_total
        elif rank.exec_seconds > 0:
            cols[(_GAUGE, *key)] = rank.bus_bytes / rank.exec_seconds
    return cols


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


def summarize(view: WindowView, settings: Settings) -> NcclStats:
    idents: set[Ident] = set()
    for key in view.columns:
        if isinstance(key, tuple) and len(key) == 8 and key[0] in (*_COUNTERS, _GAUGE):
            idents.add(key[1:])
    ranks = {}
    for key in sorted(idents, key=repr):
        covered = {name: total_increase(view.times, view.column((name, *key))) for name in _COUNTERS}
        if covered["operations"] is not None:
            ops, seconds = covered["operations"]
            exec_seconds, msg, bus = (covered[n][0] if covered[n] else 0.0 for n in ("exec", "msg", "bus"))
            ranks[key] = RankWindow(
                operations=ops, exec_seconds=exec_seconds, msg_bytes=msg, bus_bytes=bus, seconds=seconds,
                bus_bytes_per_second=bus / exec_seconds if exec_seconds > 0 else None,
                exec_ratio=clamp_ratio(exec_seconds / seconds) if seconds > 0 else None,
            )
        else:
            gauge = mean(view.column((_GAUGE, *key)))
            if gauge is not None:
                ranks[key] = RankWindow(None, None, None, None, None, gauge, None)
    return NcclStats(ranks)


def rank_window(stats: NcclStats | None, rank: NcclRank) -> RankWindow | None:
    """The window statistics of one rank of the latest reading, if it has any."""
    return stats.ranks.get(ident(rank)) if stats is not None else None


def last_operation_age(reading: Reading, rank: NcclRank, now: float | None = None) -> float | None:
    """Seconds from the rank's latest completed operation to ``now`` (monotonic; the read's
    own time by default), through the offset between the wall and monotonic clocks taken at
    the read. Never negative: the writer's clock may be a little ahead."""
    data: NcclData = reading.data
    if rank.last_unix is None or data.wall_minus_monotonic is None:
        return None
    wall_now = (now if now is not None else reading.t) + data.wall_minus_monotonic
    return max(0.0, wall_now - rank.last_unix)


# -- ranks to GPUs ------------------------------------------------------------------------------

#: How a rank was joined to its GPU, strongest first.
MATCHES = ("pid", "uuid", "device_index")


@dataclass(frozen=True, slots=True)
class GpuCollectives:
    """What NCCL's own timing says about one GPU over the window."""

    uuid: str
    index: int
    #: the owner (gpuwait.owners id) of the GPU's ranks, "" when unknown or not one owner
    owner: str
    #: (communicator, rank, kind) entries joined to this GPU
    ranks: int
    #: the weakest way one of them was joined (MATCHES)
    matched_by: str
    #: share of the window the GPU spent in NCCL kernels, summed over its communicators and
    #: capped at 1 (communicators on separate streams may overlap); None without counts
    exec_ratio: float | None
    #: bus bandwidth while in NCCL kernels, bytes per second
    bus_bytes_per_second: float | None
    #: the link the collectives are bound by, where known: the GPU's nearest RDMA NICs'
    #: active ports for communicators that span nodes, NVLink (as given) for the others
    capacity_bytes_per_second: float | None
    #: "nic", "nvlink" or "" (not known)
    capacity: str
    bus_capacity_ratio: float | None
    #: seconds since the GPU's most recent completed operation, over all its communicators
    last_operation_age_seconds: float | None


@dataclass(frozen=True, slots=True)
class RankJoin:
    gpus: dict[str, GpuCollectives]
    #: ranks of the latest reading joined to no GPU: a process in another pid namespace
    #: (a container without hostPID), one using several GPUs, or one not on this node
    unmatched: int


def join_ranks_to_gpus(
    stats: NcclStats | None,
    nccl: Reading | None,
    gpus: GpuDeviceData | None,
    rdma: RdmaData | None = None,
    *,
    owner_of: Mapping[int, str] | None = None,
    nvlink_capacity: Mapping[str, float] | None = None,
    node_hostname: str | None = None,
    now: float | None = None,
) -> RankJoin:
    """Joins the ranks of the latest ``nccl`` reading to the GPUs of ``gpus`` (the gpu_device
    payload) and sums their window statistics (``stats``) per GPU.

    A rank is joined, in this order of trust:

    1. ``pid``: its pid is among the compute processes NVML lists on exactly one GPU. NVML
       gives host pids, the record the writer's own getpid(): they agree when the job shares
       the host's pid namespace (bare metal, Slurm, a pod with hostPID).
    2. ``uuid``: its file names the GPU (Prometheus mode names each file after the device
       UUID the process's CUDA device has).
    3. ``device_index``: its CUDA device ordinal is taken as the NVML index, only when its
       host name is ``node_hostname``. This is the weakest: CUDA numbers the devices a
       process sees (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), NVML all of the node's, and
       the two agree only for a process that sees every GPU in PCI order.

    The owner of a rank joined by pid is ``owner_of[pid]`` (gpuwait.owners attribution) where
    given, else the GPU's one owner where NVML attributes its processes to exactly one.

    Capacity: a communicator spanning nodes (n_nodes > 1) is bound by the network; its GPU's
    capacity is the summed rate of the active ports of the RDMA NICs nearest to it on the
    PCIe tree (gpu_device ``nics``, NCCL's own choice of NIC: the closest by topology). Ranks
    within a node go over NVLink, whose capacity NVML does not report: ``nvlink_capacity``
    (GPU uuid -> bytes per second) supplies it where the caller knows it. NCCL's bus
    bandwidth is normalised so that it can be set against a link's speed (nccl-tests,
    doc/PERFORMANCE.md), but NICs shared by several GPUs divide their rate among them; the
    ratio is a guide, not a fraction of anything exact.
    """
    if nccl is None or gpus is None:
        return RankJoin({}, 0)
    data: NcclData = nccl.data
    by_pid: dict[int, list[int]] = {}
    by_uuid: dict[str, int] = {}
    by_index: dict[int, int] = {}
    for position, gpu in enumerate(gpus.gpus):
        by_uuid[gpu.uuid] = position
        by_index[gpu.index] = position
        for process in gpu.processes or ():
            by_pid.setdefault(process.pid, []).append(position)
    joined: dict[int, list[tuple[NcclRank, str]]] = {}
    unmatched = 0
    for rank in data.ranks:
        match = _match(rank, by_pid, by_uuid, by_index, node_hostname)
        if match is None:
            unmatched += 1
        else:
            joined.setdefault(match[0], []).append((rank, match[1]))
    out = {}
    for position, members in sorted(joined.items()):
        gpu = gpus.gpus[position]
        out[gpu.uuid] = _gpu_collectives(gpu, members, stats, nccl, rdma, owner_of, nvlink_capacity, now)
    return RankJoin(out, unmatched)


def _match(rank: NcclRank, by_pid, by_uuid, by_index, node_hostname) -> tuple[int, str] | None:
    on = by_pid.get(rank.pid, []) if rank.pid > 0 else []
    if len(on) == 1:
        return on[0], "pid"
    if rank.device_uuid in by_uuid and (not on or by_uuid[rank.device_uuid] in on):
        return by_uuid[rank.device_uuid], "uuid"
    if on:
        return None  # a process on several GPUs, and nothing says which one this rank used
    if rank.device is not None and node_hostname and rank.hostname == node_hostname and rank.device in by_index:
        return by_index[rank.device], "device_index"
    return None


def _gpu_collectives(gpu, members, stats, nccl, rdma, owner_of, nvlink_capacity, now) -> GpuCollectives:
    exec_seconds = bus_bytes = 0.0
    span = 0.0
    counted = False
    gauges: list[tuple[float, float]] = []  # (bus bandwidth, weight) of Prometheus-mode ranks
    ages = []
    owners = set()
    for rank, how in members:
        window = rank_window(stats, rank)
        if window is not None and window.operations is not None:
            counted = True
            exec_seconds += window.exec_seconds or 0.0
            bus_bytes += window.bus_bytes or 0.0
            span = max(span, window.seconds or 0.0)
        elif window is not None and window.bus_bytes_per_second is not None:
            gauges.append((window.bus_bytes_per_second, max(rank.exec_seconds, 1e-12)))
        age = last_operation_age(nccl, rank, now)
        if age is not None:
            ages.append(age)
        owners.add(_owner(rank, how, gpu, owner_of))
    if counted:
        bandwidth = bus_bytes / exec_seconds if exec_seconds > 0 else None
    else:
        weight = sum(w for _, w in gauges)
        bandwidth = sum(b * w for b, w in gauges) / weight if gauges else None
    inter_node = any((rank.n_nodes or 1) > 1 for rank, _ in members)
    if inter_node:
        capacity, kind = _nic_capacity(gpu, rdma), "nic"
    else:
        capacity, kind = (nvlink_capacity or {}).get(gpu.uuid), "nvlink"
    if capacity is None or capacity <= 0:
        capacity, kind = None, ""
    return GpuCollectives(
        uuid=gpu.uuid, index=gpu.index,
        owner=owners.pop() if len(owners) == 1 else "",
        ranks=len(members),
        matched_by=max((how for _, how in members), key=MATCHES.index),
        exec_ratio=clamp_ratio(exec_seconds / span) if counted and span > 0 else None,
        bus_bytes_per_second=bandwidth,
        capacity_bytes_per_second=capacity, capacity=kind,
        bus_capacity_ratio=bandwidth / capacity if bandwidth is not None and capacity else None,
        last_operation_age_seconds=min(ages) if ages else None,
    )


def _owner(rank: NcclRank, how: str, gpu, owner_of: Mapping[int, str] | None) -> str:
    if how == "pid" and owner_of is not None and rank.pid in owner_of:
        return owner_of[rank.pid]
    return gpu.owners[0].owner if len(gpu.owners) == 1 else ""


def _nic_capacity(gpu, rdma: RdmaData | None) -> float | None:
    if rdma is None or not gpu.nics:
        return None
    known = [RELATIONS.index(r) for r in gpu.nics.values() if r in RELATIONS]
    if not known:
        return None
    nearest = RELATIONS[min(known)]
    names = {nic for nic, relation in gpu.nics.items() if relation == nearest}
    rates = [port.rate_bytes_per_second for device in rdma.devices if device.device in names
             for port in device.ports if port.state == PORT_ACTIVE and port.rate_bytes_per_second]
    return sum(rates) if rates else None
