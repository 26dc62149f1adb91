"""What the two gpu sources' Readings hold: per tick, what moves within a second (``gpu``);
per slow interval, identity, configuration, health, processes and owners (``gpu_device``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwait.nvml.values import DeviceInfo, GpuProcess, Memory, MigInstance, NvLink, PcieLink
from gpuwait.owners.kubelet import KubeletStatus


@dataclass(frozen=True, slots=True)
class GpuTick:
    index: int
    uuid: str
    up: bool
    #: Latest driver sample (or polled value): fraction of time a kernel ran.
    utilization: float | None = None
    #: Latest memory-controller busy fraction (a bandwidth proxy, not capacity).
    memory_busy: float | None = None
    #: New driver utilization samples in this read.
    samples: int = 0
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    clocks_event_reasons: int | None = None
    #: GPM metrics over the last tick (ratios 0..1, rates bytes per second).
    gpm: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuFastData:
    backend_up: bool
    backend_reason: str
    gpus: tuple[GpuTick, ...]
    #: Window rows completed by this read: (seconds relative to the Reading's time — usually
    #: negative, the driver's samples arrive late — {(signal, index, uuid): value}). Relative,
    #: so a recorded trace keeps its rows in step with its readings when replayed.
    rows: tuple[tuple[float, dict[tuple[str, str, str], float]], ...] = ()


@dataclass(frozen=True, slots=True)
class OwnerUse:
    """One owner's share of one GPU."""

    owner: str
    #: the owner's GPU processes on this GPU
    processes: int
    memory_bytes: float | None = None
    #: sum of its processes' SM busy ratios (NVML process utilization)
    utilization: float | None = None
    #: a pod's containers with processes on this GPU: (container id from the cgroup path,
    #: container name from the kubelet or "" while unknown)
    containers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class OwnerState:
    """What an owner's processes on the host side (GPU processes and all their descendants,
    e.g. data loader workers) were doing at the read (A2, A3)."""

    #: Owner.labels(): owner, owner_kind, namespace, pod, ...
    labels: dict[str, str]
    processes: int
    threads: int
    running: int
    blocked: int
    sleeping: int
    other: int
    cpu_seconds_total: float
    #: distinct CPUs the threads last ran on, and those of the running threads
    cpus: int
    running_cpus: int
    #: bytes its processes alive now read from block devices (/proc/<pid>/io read_bytes);
    #: None where no process's file could be read. Drops when one of them exits.
    read_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str
    up: bool
    info: DeviceInfo | None = None
    memory: Memory | None = None
    utilization: float | None = None
    memory_busy: float | None = None
    #: "sm"/"memory" -> Hz
    clocks: dict[str, float] = field(default_factory=dict)
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    #: "power"/"thermal" -> seconds of clock reduction since driver load
    violation_seconds: dict[str, float] = field(default_factory=dict)
    pcie: PcieLink | None = None
    pcie_replays: float | None = None
    #: (tx, rx) bytes per second where the GPU has no PCIe byte counters
    pcie_throughput: tuple[float | None, float | None] | None = None
    nvlinks: tuple[NvLink, ...] = ()
    #: XID code -> events counted since the exporter started
    xids: dict[int, int] = field(default_factory=dict)
    processes: tuple[GpuProcess, ...] | None = None
    #: pid -> SM busy ratio
    process_sm: dict[int, float] = field(default_factory=dict)
    mig: tuple[MigInstance, ...] = ()
    #: gpu instance id -> GPM metrics over the slow interval
    mig_gpm: dict[int, dict[str, float]] = field(default_factory=dict)
    #: peer uuid -> PIX/PXB/PHB/NODE/SYS/BOARD
    peers: dict[str, str] = field(default_factory=dict)
    owners: tuple[OwnerUse, ...] = ()
    #: RDMA device -> PIX/PXB/PHB/NODE/SYS, from the PCIe tree in sysfs
    nics: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuDeviceData:
    backend_up: bool
    backend_reason: str
    driver_version: str
    cuda_version: str
    gpus: tuple[GpuDevice, ...]
    #: (index, uuid) -> {(call, error): count}
    nvml_errors: dict[tuple[int, str], dict[tuple[str, str], int]] = field(default_factory=dict)
    #: owner id -> state, for the owners of the GPU processes
    owners: dict[str, OwnerState] = field(default_factory=dict)
    #: the kubelet's pod list, where pod names are looked up (collector.gpu.kubelet-endpoint)
    kubelet: KubeletStatus | None = None
