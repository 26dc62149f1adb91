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
    #: share of the GPU's collective time (JSON mode, communicators with another rank on this
    #: node) spent waiting for a later rank of the same communicator (``peer_waits``); None
    #: where no such communicator was timed
    peer_wait_ratio: float | None = None
    #: the largest peer_wait_ratio among the other ranks of the communicators in which this
    #: GPU's rank arrived last (the others wait for it); None where it never arrived last
    waited_for_ratio: float | None = None
    #: bus bandwidth over the collective time less the waits for later ranks: the rate of the
    #: transfer itself, bytes per second, and its ratio to the capacity
    transfer_bytes_per_second: float | None = None
    transfer_capacity_ratio: float | None = None


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
    doc/PERFORMANCE.md); a NIC nearest to several GPUs is shared by them, so each is given its
    share of the NIC's rate. The ratio is a guide, not a fraction of anything exact.

    Each GPU's collectives are also set against the other ranks of their communicators on
    this node (``peer_waits``): the share of their time spent waiting for a later rank, and
    the bandwidth of the transfer once those waits are taken out.
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
    waits = peer_waits([(rank, position) for position, members in joined.items() for rank, _ in members])
    sharing = _nic_sharing(gpus)
    out = {}
    for position, members in sorted(joined.items()):
        gpu = gpus.gpus[position]
        out[gpu.uuid] = _gpu_collectives(gpu, members, rdma, owner_of, nvlink_capacity, at, waits, sharing)
    return RankJoin(out, unmatched)


@dataclass(frozen=True, slots=True)
class PeerWait:
    """One rank's collectives over the window set against the other ranks of its communicator
    on this node."""

    #: seconds of its collective time spent waiting for a later rank
    seconds: float
    #: its collective time, seconds
    exec_seconds: float
    #: the largest share of their collective time the communicator's other ranks spent
    #: waiting, where this rank arrived last (its mean time is the shortest); else None
    waited_for: float | None


def peer_waits(ranks: list[tuple[nccl_window.Rank, int]]) -> dict[nccl_window.Ident, PeerWait]:
    """How long each rank waited in its collectives for a later rank of the same
    communicator, from the spread of their execution times (JSON mode; communicators with at
    least two timed ranks on distinct GPUs of this node).

    A collective is synchronous: every rank leaves it at about the same time, once the last
    one has arrived and the data has moved, but they enter it when their own work is done. So
    the rank with the shortest execution time is the one that arrived last, and each other
    rank's extra time is its wait for it (NVIDIA/nccl#460, NCCL's maintainer on ring and
    every other all-reduce algorithm). NCCL Inspector times each collective by its kernels
    on the GPU (coll_timing_source kernel_gpu), from their start to their end, so the wait
    is in the figure. Per window only means are known: each rank's mean time per collective
    against the shortest mean, so a lateness that moves from rank to rank cancels out
    (the means come together) and what stays is a rank that is late on most steps. The last
    rank's own time may still hold a wait for a rank on another node, which this node does
    not see: the result is a lower bound of the waits."""
    groups: dict[tuple[str, str], list[tuple[nccl_window.Rank, int, float, float]]] = {}
    for rank, position in ranks:
        if rank.kind != "collective":
            continue
        done = nccl_window.activity(rank)
        if done is None or done.operations <= 0 or done.exec_seconds <= 0:
            continue
        groups.setdefault((rank.kind, rank.comm), []).append((rank, position, done.exec_seconds, done.operations))
    out: dict[nccl_window.Ident, PeerWait] = {}
    for members in groups.values():
        if len({position for _, position, _, _ in members}) < 2:
            continue
        means = [exec_s / ops for _, _, exec_s, ops in members]
        shortest = min(means)
        shares = [1.0 - shortest / m for m in means]
        last = means.index(shortest)
        for k, (rank, _, exec_s, ops) in enumerate(members):
            others = [share for j, share in enumerate(shares) if j != k]
            out[rank.ident] = PeerWait(ops * (means[k] - shortest), exec_s,
                                       max(others) if k == last and others else None)
    return out


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


def _gpu_collectives(gpu: GpuDevice, members, rdma, owner_of, nvlink_capacity, at,
                     waits: Mapping[nccl_window.Ident, PeerWait] | None = None,
                     sharing: Mapping[str, int] | None = None) -> GpuCollectives:
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
        capacity, kind = _nic_capacity(gpu, rdma, sharing), "nic"
    else:
        capacity, kind = (nvlink_capacity or {}).get(gpu.uuid), "nvlink"
    if capacity is None or capacity <= 0:
        capacity, kind = None, ""
    timed = [waits[rank.ident] for rank, _ in members if waits and rank.ident in waits]
    timed_exec = sum(w.exec_seconds for w in timed)
    waited = sum(w.seconds for w in timed)
    waited_for = [w.waited_for for w in timed if w.waited_for is not None]
    transfer = None
    if counted and exec_seconds - waited > 0:
        transfer = bus_bytes / (exec_seconds - waited)
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
        peer_wait_ratio=clamp_ratio(waited / timed_exec) if timed_exec > 0 else None,
        waited_for_ratio=max(waited_for) if waited_for else None,
        transfer_bytes_per_second=transfer,
        transfer_capacity_ratio=transfer / capacity if transfer is not None and capacity else None,
    )


def _owner(rank: nccl_window.Rank, how: str, gpu: GpuDevice, owner_of: Mapping[int, str] | None) -> str:
    if how == "pid" and owner_of is not None and rank.pid in owner_of:
        return owner_of[rank.pid]
    return gpu.owners[0].owner if len(gpu.owners) == 1 else ""


def nearest_nics(gpu: GpuDevice) -> set[str]:
    """The RDMA NICs nearest to the GPU on the PCIe tree: the ones NCCL picks for it."""
    known = [RELATIONS.index(r) for r in gpu.nics.values() if r in RELATIONS]
    if not known:
        return set()
    nearest = RELATIONS[min(known)]
    return {nic for nic, relation in gpu.nics.items() if relation == nearest}


def _nic_sharing(gpus: GpuDeviceData) -> dict[str, int]:
    """NIC -> how many of the node's GPUs have it among their nearest."""
    count: dict[str, int] = {}
    for gpu in gpus.gpus:
        for name in nearest_nics(gpu):
            count[name] = count.get(name, 0) + 1
    return count


def _nic_capacity(gpu: GpuDevice, rdma: RdmaData | None, sharing: Mapping[str, int] | None = None) -> float | None:
    """The rate of the active ports of the GPU's nearest NICs, each NIC's divided among the
    GPUs it is nearest to: GPUs that share a NIC share its rate when they communicate at once,
    as the ranks of one job do in a collective."""
    if rdma is None or not gpu.nics:
        return None
    names = nearest_nics(gpu)
    rates = [port.rate_bytes_per_second / max(1, (sharing or {}).get(device.device, 1))
             for device in rdma.devices if device.device in names
             for port in device.ports
             if port.state is not None and is_active(port.state) and port.rate_bytes_per_second]
    return sum(rates) if rates else None
