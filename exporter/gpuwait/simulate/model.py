"""Scenario models: what a node's GPUs and host are doing at any instant.

A scenario is a training or inference loop described by phases (waiting for data, computing,
exchanging gradients...), repeated with a period. At every instant it yields a NodeState of
*rates and levels* — utilization, bytes/s, queue depth — with cause and effect aligned in
time: the disk queue is long exactly while the GPUs wait on it. ``node.py`` integrates the
rates into the counters each source would read.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpuwait.core.facts import CLOCK_REASON_BITS, pcie_link_capacity

GIB = 1024**3
# Clock-event reason bits (NVML nvmlClocksEventReason*), as core.facts names them.
REASON_SW_POWER_CAP = CLOCK_REASON_BITS["sw_power_cap"]
REASON_HW_THERMAL = CLOCK_REASON_BITS["hw_thermal_slowdown"]


@dataclass(frozen=True)
class Params:
    """Knobs every scenario understands (``--simulate.param key=value``)."""

    period: float = 1.0  # seconds per step
    duty: float = 0.5  # fraction of a step the GPUs compute
    noise: float = 0.03  # relative noise on every rate
    gpus: int = 8
    cores: int = 32
    target_gpu: int = 3  # the GPU a one-GPU scenario (straggler, downtrained, lost) acts on
    lost_after: float = 20.0  # seconds into the run the target GPU falls off the bus (gpu_lost)
    #: Extra share of each step this node's GPUs compute beyond ``duty`` (node_straggler): 0 on
    #: the nodes that wait at the barrier, e.g. 0.4 on the one slow node of a multi-node job.
    node_slowdown: float = 0.0
    seed: int = 1
    #: 1: the job's loops report their timing as gpuwait.workload would (data wait, compute,
    #: communication, steps; requests for inference), so the verdict has that evidence too.
    workload: int = 0
    #: Which worker of the simulated job runs on this node: each replica is a pod of its own,
    #: so the nodes of one multi-node job show distinct owners of one workload.
    replica: int = 0


@dataclass
class GpuState:
    util: float = 0.0  # 0..1, the driver's "a kernel was running" fraction
    sm_active: float = 0.0  # 0..1, GPM SM activity
    mem_bw: float = 0.0  # 0..1, memory-controller busy (bandwidth proxy, A5)
    mem_used_bytes: float = 60 * GIB
    pcie_rx_bps: float = 0.2e9
    pcie_tx_bps: float = 0.1e9
    nvlink_bps: float = 0.0
    reasons: int = 0
    sm_clock_hz: float = 1.98e9
    power_watts: float = 120.0
    temperature_c: float = 40.0
    up: bool = True
    link_gen: int = 5
    link_width: int = 16
    has_process: bool = True


@dataclass
class DiskState:
    read_iops: float = 5.0
    read_bps: float = 5 * 128e3
    write_iops: float = 2.0
    write_bps: float = 2 * 64e3
    queue_depth: float = 0.01
    read_latency: float = 0.0001
    write_latency: float = 0.00005


@dataclass
class PortState:
    rx_bps: float = 1e6
    tx_bps: float = 1e6
    ecn_marked_rate: float = 0.0  # packets/s
    cnp_rate: float = 0.0  # CNPs sent/handled per second
    xmit_wait_rate: float = 0.0  # ticks/s
    retransmit_rate: float = 0.0  # out_of_sequence + local_ack_timeout_err per second


@dataclass
class NfsOpState:
    ops_rate: float = 0.0
    latency: float = 0.0005


@dataclass
class NodeState:
    gpus: list[GpuState]
    core_busy: list[float]
    procs_running: float = 2.0
    procs_blocked: float = 0.0
    psi_cpu_some: float = 0.0
    psi_io_some: float = 0.0
    psi_io_full: float = 0.0
    psi_memory_some: float = 0.0
    disks: dict[str, DiskState] = field(default_factory=dict)
    nics: dict[str, PortState] = field(default_factory=dict)  # plain netdevs (no RDMA)
    rdma: dict[str, PortState] = field(default_factory=dict)  # "mlx5_0" -> port 1
    nfs_ops: dict[str, NfsOpState] = field(default_factory=dict)
    #: The job's threads by state, summed over its processes (R and D as /proc shows them).
    owner_running_threads: float = 1.0
    owner_blocked_threads: float = 0.0
    owner_cpu_cores: float = 0.2  # CPU seconds per second used by the job


@dataclass(frozen=True)
class Topology:
    """What the simulated node is made of."""

    disks: tuple[str, ...] = ("nvme0n1", "nvme1n1")
    nics: tuple[str, ...] = ("eth0",)
    rdma_devices: tuple[str, ...] = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    rdma_link_layer: str = "InfiniBand"  # or "Ethernet" (RoCE)
    nfs_mount: str = "/mnt/datasets"
    disk_read_limit_bps: float = 6.5e9
    rdma_rate_bps: float = 50e9  # 400 Gb/s


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    #: The verdict the analysis should reach for the affected GPUs.
    expected: str
    state: Callable[["Scenario", float], NodeState]
    params: Params = Params()
    topology: Topology = Topology()
    #: The GPUs the expected verdict is about (None: all that are up).
    affected: Callable[[Params], tuple[int, ...]] | None = None

    def with_params(self, **changes) -> "Scenario":
        return replace(self, params=replace(self.params, **changes))

    def affected_gpus(self) -> tuple[int, ...]:
        if self.affected is not None:
            return self.affected(self.params)
        return tuple(range(self.params.gpus))


# -- building blocks ---------------------------------------------------------------------------

def phase(t: float, period: float) -> float:
    """Position in the current step, 0..1."""
    return (t % period) / period


def baseline(s: Scenario) -> NodeState:
    p = s.params
    topo = s.topology
    return NodeState(
        gpus=[GpuState() for _ in range(p.gpus)],
        core_busy=[0.03] * p.cores,
        disks={d: DiskState() for d in topo.disks},
        nics={n: PortState() for n in topo.nics},
        rdma={d: PortState() for d in topo.rdma_devices},
        nfs_ops={op: NfsOpState(ops_rate=1.0) for op in ("READ", "GETATTR", "LOOKUP", "ACCESS", "OPEN")},
    )


def compute(g: GpuState, intensity: float = 0.97) -> None:
    g.util = intensity
    g.sm_active = intensity * 0.8
    g.mem_bw = intensity * 0.55
    g.power_watts = 650.0
    g.temperature_c = 68.0


def loader_cores(node: NodeState, busy: float, count: int = 4) -> None:
    """Background DataLoader workers: a few cores moderately busy, as in any healthy job."""
    for c in range(min(count, len(node.core_busy))):
        node.core_busy[c] = busy


def _all_gpus(node: NodeState, fn) -> None:
    for g in node.gpus:
        if g.up:
            fn(g)


# -- scenarios ---------------------------------------------------------------------------------

def _healthy(s: Scenario, t: float) -> NodeState:
    node = baseline(s)
    _all_gpus(node, compute)
    loader_cores(node, 0.35)
    node.owner_cpu_cores = 1.6
    node.owner_running_threads = 3
    return node


def _data_pipeline(s: Scenario, t: float) -> NodeState:
    """Decode-bound: the GPU eats a batch faster than two decode threads make one."""
    node = baseline(s)
    computing = phase(t, s.params.period) < s.params.duty
    if computing:
        _all_gpus(node, compute)
    node.core_busy[0] = node.core_busy[1] = 1.0  # the decode threads never rest
    node.core_busy[2] = 0.3
    node.procs_running = 6.0
    node.psi_cpu_some = 0.45
    node.owner_cpu_cores = 2.3
    node.owner_running_threads = 4
    return node


def _storage(small_random: bool) -> Callable[[Scenario, float], NodeState]:
    def state(s: Scenario, t: float) -> NodeState:
        node = baseline(s)
        p = s.params
        computing = phase(t, p.period) < p.duty
        loader_cores(node, 0.2)
        node.owner_cpu_cores = 0.6
        # Storage is the bottleneck, so the loader's readers are never done: while the GPU
        # computes they already wait on the next batch's reads (D state).
        node.owner_blocked_threads = 12.0
        if computing:
            _all_gpus(node, compute)
            return node
        # Waiting on reads: the queue is long and the loader's threads sit in D state.
        for disk in node.disks.values():
            if small_random:
                disk.read_iops, disk.read_bps = 90_000.0, 90_000.0 * 8192
                disk.queue_depth, disk.read_latency = 48.0, 0.0015
            else:
                disk.read_bps = s.topology.disk_read_limit_bps / len(node.disks)
                disk.read_iops = disk.read_bps / (1024 * 1024)
                disk.queue_depth, disk.read_latency = 12.0, 0.004
        node.psi_io_some, node.psi_io_full = 0.7, 0.4
        node.procs_blocked = 12.0
        node.owner_blocked_threads = 12.0
        node.owner_running_threads = 0.0
        return node

    return state


def _nfs_metadata(s: Scenario, t: float) -> NodeState:
    """Many small files on NFS: GETATTR/LOOKUP dominate and each waits on the server."""
    node = baseline(s)
    computing = phase(t, s.params.period) < s.params.duty
    node.owner_cpu_cores = 0.5
    # The readers wait on the server for the next files while the GPU computes, too.
    node.owner_blocked_threads = 8.0
    if computing:
        _all_gpus(node, compute)
    else:
        node.nfs_ops["GETATTR"] = NfsOpState(ops_rate=4000.0, latency=0.012)
        node.nfs_ops["LOOKUP"] = NfsOpState(ops_rate=3000.0, latency=0.015)
        node.nfs_ops["ACCESS"] = NfsOpState(ops_rate=1500.0, latency=0.010)
        node.nfs_ops["OPEN"] = NfsOpState(ops_rate=800.0, latency=0.014)
        node.nfs_ops["READ"] = NfsOpState(ops_rate=800.0, latency=0.006)
        node.nics["eth0"] = PortState(rx_bps=30e6, tx_bps=4e6)
        node.psi_io_some = 0.6
        node.procs_blocked = 8.0
        node.owner_blocked_threads = 8.0
        node.owner_running_threads = 0.0
    return node


def _host_transfer(s: Scenario, t: float) -> NodeState:
    """Batches copied host-to-device over PCIe between kernels, at the link's limit."""
    node = baseline(s)
    computing = phase(t, s.params.period) < s.params.duty
    node.owner_cpu_cores = 1.0
    loader_cores(node, 0.3)
    for g in node.gpus:
        if not g.up:
            continue
        if computing:
            compute(g)
        else:
            capacity = pcie_link_capacity(g.link_gen, g.link_width)
            g.pcie_rx_bps = 0.85 * capacity
            g.util = 0.02
    return node


def _network(roce: bool) -> Callable[[Scenario, float], NodeState]:
    def state(s: Scenario, t: float) -> NodeState:
        """Data-parallel training: compute together, then AllReduce over RDMA, GPUs idle."""
        node = baseline(s)
        computing = phase(t, s.params.period) < s.params.duty
        loader_cores(node, 0.3)
        node.owner_cpu_cores = 1.5
        if computing:
            _all_gpus(node, compute)
            return node
        for port in node.rdma.values():
            port.rx_bps = port.tx_bps = 0.8 * s.topology.rdma_rate_bps
            if roce:
                port.ecn_marked_rate, port.cnp_rate = 40_000.0, 35_000.0
                port.retransmit_rate = 50.0
            else:
                port.xmit_wait_rate = 2.0e7
        for g in node.gpus:
            g.util = 0.03  # NCCL kernels spin a few SMs while they wait for the wire
            g.sm_active = 0.02
            g.nvlink_bps = 100e9
        return node

    return state


def _network_tcp_sleeping(s: Scenario, t: float) -> NodeState:
    """All-reduce over TCP (Gloo) on the Ethernet NIC, the job asleep in socket reads while it
    waits: no CPU, no D state, yet the GPUs wait on the network."""
    node = baseline(s)
    computing = phase(t, s.params.period) < s.params.duty
    node.owner_cpu_cores = 0.02
    node.owner_running_threads = 0.0
    if computing:
        _all_gpus(node, compute)
    else:
        node.nics["eth0"] = PortState(rx_bps=9e9, tx_bps=9e9)
    return node


def _straggler(s: Scenario, t: float) -> NodeState:
    """One GPU takes longer per step; the others finish and wait for it at the barrier."""
    node = baseline(s)
    p = s.params
    x = phase(t, p.period)
    loader_cores(node, 0.3)
    node.owner_cpu_cores = 1.5
    for i, g in enumerate(node.gpus):
        if not g.up:
            continue
        if i == p.target_gpu:
            if x < 0.95:
                compute(g)
        elif x < p.duty:
            compute(g)
        else:
            # Waiting in the collective for the slow peer: NCCL's kernel stays resident
            # (utilization 100 %) on the few SMs its channels occupy, moving nothing yet.
            g.util, g.sm_active, g.mem_bw = 1.0, 0.15, 0.02
    # The AllReduce itself is short and lands after the straggler finishes.
    if x >= 0.95:
        for port in node.rdma.values():
            port.rx_bps = port.tx_bps = 0.3 * s.topology.rdma_rate_bps
    return node


def _node_straggler(s: Scenario, t: float) -> NodeState:
    """One node of a multi-node job: its GPUs compute ``duty + node_slowdown`` of each step,
    then join the step's collective, which completes only when the slowest node has joined.
    A multi-node job is one exporter per node (distinct seeds give distinct GPU UUIDs, the
    owner is the same everywhere) with a slowdown on the slow one."""
    node = baseline(s)
    p = s.params
    x = phase(t, p.period)
    loader_cores(node, 0.3)
    node.owner_cpu_cores = 1.5
    joined = min(0.9, p.duty + p.node_slowdown)
    for g in node.gpus:
        if not g.up:
            continue
        if x < joined:
            compute(g)
        else:
            g.util = 0.03  # NCCL kernels spin in the collective until the slowest node arrives
            g.sm_active = 0.02
    if x >= joined:
        # The nodes already in the collective reduce among themselves while the late one
        # computes; the last exchange follows its arrival.
        for port in node.rdma.values():
            port.rx_bps = port.tx_bps = 0.3 * s.topology.rdma_rate_bps
    return node


def _insufficient_work(s: Scenario, t: float) -> NodeState:
    """Small batches: short kernels with launch gaps; the launching thread is busy, nothing
    else waits. More GPUs would not help (A4)."""
    node = baseline(s)
    rng = random.Random(int(t * 1000) ^ s.params.seed)
    node.core_busy[0] = 0.7  # the Python thread launching kernels
    node.owner_cpu_cores = 0.8
    node.owner_running_threads = 1.0
    for g in node.gpus:
        if g.up:
            # Kernels of a few ms with gaps: the driver's samples read ~25% on average.
            g.util = 0.9 if rng.random() < 0.25 else 0.0
            g.sm_active = g.util * 0.3
            g.mem_bw = g.util * 0.2
    return node


def _low_load_inference(s: Scenario, t: float) -> NodeState:
    """An inference server with few requests: the GPU is idle because nobody asks (A1, A13)."""
    node = baseline(s)
    rng = random.Random(int(t * 10) ^ s.params.seed)
    node.owner_cpu_cores = 0.02
    node.owner_running_threads = 0.0
    for g in node.gpus:
        if g.up and rng.random() < 0.05:
            compute(g, 0.8)
    return node


def _throttled(s: Scenario, t: float) -> NodeState:
    """Busy, but clocks held down by power and thermal limits."""
    node = _healthy(s, t)
    for g in node.gpus:
        if g.up:
            g.reasons = REASON_SW_POWER_CAP | REASON_HW_THERMAL
            g.sm_clock_hz = 1.2e9
            g.temperature_c = 89.0
            g.power_watts = 700.0
    return node


def _pcie_downtrained(s: Scenario, t: float) -> NodeState:
    """One GPU's link trained at Gen4 x8: its host-to-device copies take four times as long, and
    the others wait for it at the step's all-reduce."""
    node = baseline(s)
    p = s.params
    x = phase(t, p.period)
    node.owner_cpu_cores = 1.0
    loader_cores(node, 0.3)
    copy = 0.1  # share of a step the healthy GPUs spend copying
    for i, g in enumerate(node.gpus):
        if not g.up:
            continue
        slow = i == p.target_gpu
        if slow:
            g.link_gen, g.link_width = 4, 8
        copy_share = copy * 4 if slow else copy
        capacity = pcie_link_capacity(g.link_gen, g.link_width)
        if x < copy_share:
            g.pcie_rx_bps = 0.9 * capacity
            g.util = 0.02
        elif x < copy_share + 0.55:
            compute(g)
        elif x < copy * 4 + 0.55:
            # The step's all-reduce: the healthy GPUs wait in it for the slow one, NCCL's
            # kernel resident on a few SMs (utilization 100 %).
            g.util, g.sm_active, g.mem_bw = 1.0, 0.15, 0.02
    return node


def _gpu_lost(s: Scenario, t: float) -> NodeState:
    node = _healthy(s, t)
    if t >= s.params.lost_after:
        g = node.gpus[s.params.target_gpu]
        g.up = False
        g.util = 0.0
    return node


def _checkpoint(s: Scenario, t: float) -> NodeState:
    """Look-alike: healthy training that pauses to write a checkpoint (8 s every 30 s, so every
    window holds one). A write burst is a pause the job chose, not a starved data pipeline."""
    node = _healthy(s, t)
    if (t % 30.0) < 8.0:
        for g in node.gpus:
            g.util = g.sm_active = g.mem_bw = 0.0
        for disk in node.disks.values():
            disk.write_bps, disk.write_iops = 3e9, 3000.0
            disk.queue_depth, disk.write_latency = 30.0, 0.01
        node.psi_io_some = 0.5
    return node


def _busy_high_cpu(s: Scenario, t: float) -> NodeState:
    """Look-alike: busy GPUs and busy CPUs: nothing waits (A3)."""
    node = _healthy(s, t)
    node.core_busy = [0.97] * len(node.core_busy)
    node.psi_cpu_some = 0.3
    node.procs_running = 40.0
    return node


def _memory_full(s: Scenario, t: float) -> NodeState:
    """Look-alike: memory capacity nearly full while bandwidth is low and the GPU is busy (A5)."""
    node = _healthy(s, t)
    for g in node.gpus:
        g.mem_used_bytes = 139 * GIB
        g.mem_bw = 0.08
    return node


def _unrelated_nic(s: Scenario, t: float) -> NodeState:
    """Look-alike: a NIC bursting with traffic unrelated to the GPUs, whose dips (a slow
    loader) follow another rhythm."""
    node = _data_pipeline(s, t)
    burst = (t % 2.7) < 0.9
    node.nics["eth0"] = PortState(rx_bps=9e8 if burst else 1e7, tx_bps=5e7)
    return node


SCENARIOS: dict[str, Scenario] = {}


def _add(name: str, description: str, expected: str, state, **kw) -> None:
    SCENARIOS[name] = Scenario(name, description, expected, state, **kw)


_one = lambda p: (p.target_gpu,)  # noqa: E731
_others = lambda p: tuple(i for i in range(p.gpus) if i != p.target_gpu)  # noqa: E731

_add("healthy", "Busy GPUs, no waits.", "none", _healthy)
_add("data_pipeline", "Decode-bound: two cores saturated, GPU gaps between batches (A2, A3).", "data_pipeline", _data_pipeline)
_add("storage", "Many small random reads: long queue, high IOPS, small requests, threads in D state (A6, A7).", "storage", _storage(True))
_add("storage_sequential", "Large sequential reads at the devices' throughput limit (A7).", "storage", _storage(False))
_add("nfs_metadata", "Dataset of small files on NFS: slow GETATTR/LOOKUP while the GPUs wait (A6).", "storage", _nfs_metadata)
_add("host_transfer", "Host-to-device copies at the PCIe limit during the gaps (A9).", "host_transfer", _host_transfer)
_add("network_allreduce", "AllReduce over InfiniBand: periodic dips aligned with RDMA bursts, xmit_wait rising (A9, A10, A11).", "network", _network(False))
_add("network_allreduce_roce", "AllReduce over RoCE with ECN/CNP congestion (A11).", "network", _network(True),
     topology=Topology(rdma_link_layer="Ethernet"))
_add("network_tcp_sleeping", "All-reduce over TCP with the job asleep in socket reads: no CPU used, still a network wait (A10).", "network", _network_tcp_sleeping)
_add("straggler", "One GPU computes longer; its peers wait at the barrier (A12).", "sync", _straggler, affected=_others)
_add("node_straggler", "A peer node of a multi-node job is slower: every GPU here finishes and waits in the collective, "
     "which the node alone can only see as network; the cross-node comparison names the slow node "
     "(node_slowdown=0.4 makes this node the slow one) (A10, A12).", "network", _node_straggler)
_add("insufficient_work", "Small batches: low utilization, nothing waiting, launch thread busy (A4).", "insufficient_work", _insufficient_work)
_add("low_load_inference", "Few inference requests: low utilization without demand, nothing to fix (A1, A13).", "none", _low_load_inference)
_add("throttled", "Busy under power and thermal clock limits.", "throttled", _throttled)
_add("pcie_downtrained", "One GPU's link at Gen4 x8 in a Gen5 x16 slot: its copies dominate its steps (A9).", "host_transfer", _pcie_downtrained, affected=_one)
_add("gpu_lost", "One GPU falls off the bus; the rest keep training.", "none", _gpu_lost, affected=_others)
_add("checkpoint", "Look-alike: checkpoint writes pause training 8 s in every 30 s.", "none", _checkpoint)
_add("busy_high_cpu", "Look-alike: busy GPUs with busy CPUs (A3).", "none", _busy_high_cpu)
_add("memory_full", "Look-alike: GPU memory full, bandwidth low, GPU busy (A5).", "none", _memory_full)
_add("unrelated_nic", "Look-alike: decode-bound dips while a NIC bursts on another rhythm (A10).", "data_pipeline", _unrelated_nic)


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None


def noisy(value: float, rng: random.Random, noise: float) -> float:
    return max(0.0, value * (1.0 + rng.gauss(0.0, noise))) if noise > 0 else value


def clamp01(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x


def pcie_capacity(g: GpuState) -> float:
    return pcie_link_capacity(g.link_gen, g.link_width) or 0.0


