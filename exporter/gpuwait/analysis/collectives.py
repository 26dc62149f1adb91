"""Which GPU each NCCL rank ran on, and what NCCL's own timing says about each GPU over the
window (A9, A10, A12): the nccl collector's ranks (through its window accessors) joined to
the gpu_device payload's GPUs, and, for communicators that span nodes, to the RDMA ports that
bound them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuwait.collectors.gpu.payload import GpuDevice, GpuDeviceData
from gpuwait.collectors.nccl import window as nccl_window
from gpuwait.collectors.rdma.parse import is_active
from gpuwait.collectors.rdma.payload import RdmaData
from gpuwait.core.ring import WindowView
from gpuwait.core.series import clamp_ratio
from gpuwait.core.topology import RELATIONS

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
    #: ranks of the window joined to no GPU: a process in another pid namespace (a container
    #: without hostPID), one using several GPUs, or one not on this node
    unmatched: int


def join_ranks_to_gpus(
    view: WindowView | None,
    gpus: GpuDeviceData | None,
    rdma: RdmaData | None = None,
    *,
    owner_of: Mapping[int, str] | None = None,
    nvlink_capacity: Mapping[str, float] | None = None,
    node_hostname: str | None = None,
    at: float | None = None,
) -> RankJoin:
    """Joins the ranks of the ``nccl`` window ``view`` to the GPUs of ``gpus`` (the
    gpu_device payload) and sums their window statistics per GPU; ages are taken at ``at``
    (the window's end by default).

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
    if view is None or gpus is None:
        return RankJoin({}, 0)
    by_pid: dict[int, list[int]] = {}
    by_uuid: dict[str, int] = {}
    by_index: dict[int, int] = {}
    for position, gpu in enumerate(gpus.gpus):
        by_uuid[gpu.uuid] = position
        by_index[gpu.index] = position
        for process in gpu.processes or ():
            by_pid.setdefault(process.pid, []).append(position)
    joined: dict[int, list[tuple[nccl_window.Rank, str]]] = {}
    unmatched = 0
    for rank in nccl_window.ranks(view):
        match = _match(rank, by_pid, by_uuid, by_index, node_hostname)
        if match is None:
            unmatched += 1
        else:
            joined.setdefault(match[0], []).append((rank, match[1]))
    out = {}
    for position, members in sorted(joined.items()):
        gpu = gpus.gpus[position]
        out[gpu.uuid] = _gpu_collectives(gpu, members, rdma, owner_of, nvlink_capacity, at)
    return RankJoin(out, unmatched)


def _match(rank: nccl_window.Rank, by_pid, by_uuid, by_index, node_hostname) -> tuple[int, str] | None:
    on = by_pid.get(rank.pid, []) if rank.pid > 0 else []
    if len(on) == 1:
        return on[0], "pid"
    if rank.uuid in by_uuid and (not on or by_uuid[rank.uuid] in on):
        return by_uuid[rank.uuid], "uuid"
    if on:
        return None  # a process on several GPUs, and nothing says which one this rank used
    if rank.device is not None and node_hostname and rank.hostname == node_hostname and rank.device in by_index:
        return by_index[rank.device], "device_index"
    return None


def _gpu_collectives(gpu: GpuDevice, members, rdma, owner_of, nvlink_capacity, at) -> GpuCollectives:
    exec_seconds = bus_bytes = 0.0
    span = 0.0
    counted = False
    gauges: list[float] = []  # bus bandwidth of Prometheus-mode ranks
    ages = []
    owners = set()
    for rank, how in members:
        done = nccl_window.activity(rank)
        if done is not None:
            counted = True
            exec_seconds += done.exec_seconds
            bus_bytes += done.bus_bytes
            span = max(span, done.seconds)
        else:
            bandwidth = nccl_window.bus_bytes_per_second(rank)
            if bandwidth is not None:
                gauges.append(bandwidth)
        age = nccl_window.seconds_since_completion(rank, at)
        if age is not None:
            ages.append(age)
        owners.add(_owner(rank, how, gpu, owner_of))
    if counted:
        bandwidth = bus_bytes / exec_seconds if exec_seconds > 0 else None
    else:
        # The plugin's gauges give no execution time to weight its communicators by.
        bandwidth = sum(gauges) / len(gauges) if gauges else None
    inter_node = any((nccl_window.n_nodes(rank) or 1) > 1 for rank, _ in members)
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


def _owner(rank: nccl_window.Rank, how: str, gpu: GpuDevice, owner_of: Mapping[int, str] | None) -> str:
    if how == "pid" and owner_of is not None and rank.pid in owner_of:
        return owner_of[rank.pid]
    return gpu.owners[0].owner if len(gpu.owners) == 1 else ""


def _nic_capacity(gpu: GpuDevice, rdma: RdmaData | None) -> float | None:
    if rdma is None or not gpu.nics:
        return None
    known = [RELATIONS.index(r) for r in gpu.nics.values() if r in RELATIONS]
    if not known:
        return None
    nearest = RELATIONS[min(known)]
    names = {nic for nic, relation in gpu.nics.items() if relation == nearest}
    rates = [port.rate_bytes_per_second for device in rdma.devices if device.device in names
             for port in device.ports
             if port.state is not None and is_active(port.state) and port.rate_bytes_per_second]
    return sum(rates) if rates else None
