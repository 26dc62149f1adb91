"""Metrics of the gpu collector (sources ``gpu`` and ``gpu_device``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.gpu.payload import GpuDeviceData, GpuFastData
from gpuwait.collectors.gpu.window import GpuWindowStats
from gpuwait.core.config import Settings
from gpuwait.core.facts import CLOCK_EVENT_REASONS, pcie_link_capacity
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot
from gpuwait.owners.cgroup import LABEL_NAMES as OWNER_LABELS
from gpuwait.owners.cgroup import info_label_values
from gpuwait.owners.kubelet import KubeletStatus

SOURCE = "gpu"
G = ("gpu", "uuid")
_UTIL = ("A1", "A4", "A14")
_A5 = ("A5",)
_A9 = ("A9",)
_LINKS = ("A9", "A10")
_SPREAD = ("A4", "A12", "A14")
_HEALTH = ("A14",)

METRICS = (
    # -- backend and identity ------------------------------------------------------------------
    MetricSpec("gpuwait_gpu_backend_up", "gauge",
               "1 when NVML is initialised and answering, 0 when no GPU backend is available (no driver or library, or the driver went away); the log says why once.",
               source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_up", "gauge",
               "1 when the GPU answered the latest read, 0 when it is lost (fell off the bus, needs a reset), unresponsive, or the backend is down.",
               labels=G, source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_info", "gauge",
               "Always 1; labels carry the GPU's model, PCI bus id, driver and CUDA versions, NUMA node, MIG and persistence mode and architecture; join other GPU series on uuid.",
               labels=G + ("name", "pci_bus_id", "driver_version", "cuda_version", "numa_node", "mig_mode", "persistence_mode", "architecture"),
               source=SOURCE, claims=("A9", "A14")),
    MetricSpec("gpuwait_gpu_nvml_errors_total", "counter",
               "NVML calls that failed, by call and error name; calls a GPU does not offer are counted once and then not asked again, CALL_TIMEOUT counts calls abandoned after collector.gpu.call-timeout.",
               labels=G + ("call", "error"), source=SOURCE, claims=_HEALTH),
    # -- activity (fast tier, latest tick) -----------------------------------------------------
    MetricSpec("gpuwait_gpu_utilization_ratio", "gauge",
               "Fraction of the driver's latest sample period in which a kernel ran (NVML utilization.gpu); it says busy, not how much of the GPU was used.",
               labels=G, unit="ratio", source=SOURCE, claims=_UTIL),
    MetricSpec("gpuwait_gpu_memory_busy_ratio", "gauge",
               "Fraction of the driver's latest sample period in which device memory was read or written (NVML utilization.memory): a bandwidth proxy, unrelated to memory capacity.",
               labels=G, unit="ratio", source=SOURCE, claims=_A5),
    MetricSpec("gpuwait_gpu_sm_active_ratio", "gauge",
               "Fraction of SMs busy over the latest fast tick (GPM SM_UTIL; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=_UTIL),
    MetricSpec("gpuwait_gpu_sm_occupancy_ratio", "gauge",
               "Resident warps relative to the maximum over the latest fast tick (GPM SM_OCCUPANCY; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=("A4",)),
    MetricSpec("gpuwait_gpu_tensor_active_ratio", "gauge",
               "Fraction of time the SMs ran any tensor-core operation over the latest fast tick (GPM ANY_TENSOR_UTIL; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=("A4",)),
    MetricSpec("gpuwait_gpu_dram_active_ratio", "gauge",
               "DRAM bandwidth used relative to the peak over the latest fast tick (GPM DRAM_BW_UTIL; Hopper and newer): the bandwidth side of memory, separate from capacity.",
               labels=G, unit="ratio", source=SOURCE, claims=_A5),
    # -- memory capacity -----------------------------------------------------------------------
    MetricSpec("gpuwait_gpu_memory_total_bytes", "gauge",
               "Device memory capacity; capacity in use says nothing about bandwidth.",
               labels=G, unit="bytes", source=SOURCE, claims=_A5),
    MetricSpec("gpuwait_gpu_memory_used_bytes", "gauge",
               "Device memory allocated.",
               labels=G, unit="bytes", source=SOURCE, claims=_A5),
    MetricSpec("gpuwait_gpu_memory_reserved_bytes", "gauge",
               "Device memory the driver and firmware set aside (nvmlDeviceGetMemoryInfo_v2 only).",
               labels=G, unit="bytes", source=SOURCE, claims=_A5),
    # -- PCIe ------------------------------------------------------------------------------------
    MetricSpec("gpuwait_gpu_pcie_bytes_total", "counter",
               "Bytes through the GPU's PCIe link by direction (tx leaves the GPU), from the driver's byte counters where the GPU has them.",
               labels=G + ("direction",), unit="bytes", source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_throughput_bytes_per_second", "gauge",
               "PCIe throughput by direction: GPM over the latest fast tick where the GPU has GPM, else NVML's 20 ms throughput sample taken every slow interval.",
               labels=G + ("direction",), unit="bytes", source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_link_generation", "gauge",
               "Current PCIe link generation; many GPUs lower it when idle, so compare with the maximum under load.",
               labels=G, source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_link_max_generation", "gauge",
               "Highest PCIe generation the GPU and its slot can reach together.",
               labels=G, source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_link_gpu_max_generation", "gauge",
               "Highest PCIe generation the GPU itself supports, whatever the slot.",
               labels=G, source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_link_width", "gauge",
               "Current PCIe link width in lanes; below the maximum under load means a downtrained link.",
               labels=G, source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_link_max_width", "gauge",
               "Widest PCIe link the GPU and its slot can reach, in lanes.",
               labels=G, source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_link_capacity_bytes_per_second", "gauge",
               "Bytes per second one direction of the GPU's PCIe link carries at its current generation and width: the lane's transfer rate less its line encoding (8b/10b to Gen2, 128b/130b Gen3 to Gen5, 242 of 256 FLIT bytes at Gen6), times the lanes.",
               labels=G, unit="bytes", source=SOURCE, claims=_A9),
    MetricSpec("gpuwait_gpu_pcie_replays_total", "counter",
               "PCIe replays (retransmitted TLPs) of the GPU's link: a rising count means a marginal link.",
               labels=G, source=SOURCE, claims=_A9),
    # -- NVLink ----------------------------------------------------------------------------------
    MetricSpec("gpuwait_gpu_nvlink_up", "gauge",
               "1 when the NVLink link is active, 0 when it is down.",
               labels=G + ("link",), source=SOURCE, claims=_LINKS),
    MetricSpec("gpuwait_gpu_nvlink_bytes_total", "counter",
               "Data bytes through each NVLink link by direction (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX).",
               labels=G + ("link", "direction"), unit="bytes", source=SOURCE, claims=_LINKS),
    MetricSpec("gpuwait_gpu_nvlink_errors_total", "counter",
               "NVLink data-link errors per link: crc_flit, crc_data, replay and recovery.",
               labels=G + ("link", "counter"), source=SOURCE, claims=_LINKS),
    MetricSpec("gpuwait_gpu_nvlink_throughput_bytes_per_second", "gauge",
               "NVLink throughput over all links by direction over the latest fast tick (GPM; Hopper and newer).",
               labels=G + ("direction",), unit="bytes", source=SOURCE, claims=_LINKS),
    # -- clocks, power, thermal ------------------------------------------------------------------
    MetricSpec("gpuwait_gpu_clock_hertz", "gauge",
               "Current clock of the SMs (clock=sm) and of device memory (clock=memory).",
               labels=G + ("clock",), unit="hertz", source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_power_watts", "gauge",
               "Power draw of the GPU board.",
               labels=G, unit="watts", source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_power_limit_watts", "gauge",
               "Power limit the driver enforces.",
               labels=G, unit="watts", source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_energy_joules_total", "counter",
               "Energy the GPU consumed since the driver was loaded.",
               labels=G, unit="joules", source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_temperature_celsius", "gauge",
               "GPU die temperature.",
               labels=G, unit="celsius", source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_clocks_event_reason_active", "gauge",
               "1 when the clock-event reason (nvmlDeviceGetCurrentClocksEventReasons) held at the latest fast tick, 0 when not; gpu_idle is benign, power and thermal reasons mean the GPU is throttled.",
               labels=G + ("reason",), source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_clocks_violation_seconds_total", "counter",
               "Time the GPU's clocks were held below what the work asked for, by policy (power, thermal), since the driver was loaded.",
               labels=G + ("policy",), unit="seconds", source=SOURCE, claims=_HEALTH),
    # -- events, processes, topology, MIG ------------------------------------------------------
    MetricSpec("gpuwait_gpu_xid_errors_total", "counter",
               "XID critical-error events the driver reported for the GPU since the exporter started, by XID code.",
               labels=G + ("xid",), source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_gpu_processes", "gauge",
               "Compute processes running on the GPU.",
               labels=G, source=SOURCE, claims=("A1", "A2")),
    MetricSpec("gpuwait_gpu_owner_info", "gauge",
               "Always 1 per owner (pod, Slurm job, container, systemd unit or host) of a compute process on the GPU; labels come from the process's cgroup, and owner is the key the other gpuwait_gpu_owner_* series carry. A pod's namespace and name are owner_namespace and owner_pod, apart from the namespace and pod labels of the exporter's own scrape target.",
               labels=G + OWNER_LABELS, source=SOURCE, claims=("A2", "A12")),
    MetricSpec("gpuwait_gpu_owner_container_info", "gauge",
               "Always 1 per container of a pod with compute processes on the GPU; container_id comes from the process's cgroup, owner_container is the container's name from the kubelet's pod list, empty while unknown.",
               labels=G + ("owner", "container_id", "owner_container"), source=SOURCE, claims=("A2", "A12")),
    MetricSpec("gpuwait_gpu_owner_processes", "gauge",
               "Compute processes of the owner on the GPU.",
               labels=G + ("owner",), source=SOURCE, claims=("A2",)),
    MetricSpec("gpuwait_gpu_owner_memory_used_bytes", "gauge",
               "Device memory the owner's processes hold on the GPU.",
               labels=G + ("owner",), unit="bytes", source=SOURCE, claims=_A5),
    MetricSpec("gpuwait_gpu_owner_utilization_ratio", "gauge",
               "Fraction of time the owner's processes kept the GPU's SMs busy over the driver's recent samples (NVML process utilization).",
               labels=G + ("owner",), unit="ratio", source=SOURCE, claims=("A1", "A4")),
    MetricSpec("gpuwait_gpu_owner_host_processes", "gauge",
               "Host processes of an owner of GPU processes: the GPU processes and all their descendants, such as data loader workers.",
               labels=("owner",), source=SOURCE, claims=("A2",)),
    MetricSpec("gpuwait_gpu_owner_threads", "gauge",
               "Threads of those host processes by state at the latest slow read: running (R), blocked in the kernel, nearly always on IO (D), sleeping (S), other.",
               labels=("owner", "state"), source=SOURCE, claims=("A2", "A3", "A6")),
    MetricSpec("gpuwait_gpu_owner_cpus", "gauge",
               "Distinct CPUs the owner's host threads last ran on (all of them, and the running ones): a few cores carrying a pipeline show here, not in an average.",
               labels=("owner", "threads"), source=SOURCE, claims=("A3",)),
    MetricSpec("gpuwait_gpu_owner_cpu_seconds_total", "counter",
               "CPU time (user and system) of the owner's host processes, exited workers included, since the exporter saw them.",
               labels=("owner",), unit="seconds", source=SOURCE, claims=("A2", "A3")),
    MetricSpec("gpuwait_kubelet_up", "gauge",
               "1 when the latest request for the kubelet's pod list (collector.gpu.kubelet-endpoint), which names the pods of GPU owners, succeeded, 0 when it failed; absent where pod names are not looked up.",
               source=SOURCE, claims=("A12",)),
    MetricSpec("gpuwait_kubelet_errors_total", "counter",
               "Failed requests for the kubelet's pod list by cause: token, connect, timeout, tls, unauthorized, forbidden (RBAC), status, protocol, too_large, parse.",
               labels=("cause",), source=SOURCE, claims=("A12",)),
    MetricSpec("gpuwait_kubelet_requests_total", "counter",
               "Requests for the kubelet's pod list, answered or not.",
               source=SOURCE, claims=("A12",)),
    MetricSpec("gpuwait_kubelet_pods", "gauge",
               "Pods whose namespace and name the exporter knows from the kubelet's pod list.",
               source=SOURCE, claims=("A12",)),
    MetricSpec("gpuwait_gpu_nic_topology_info", "gauge",
               "Always 1 per GPU and RDMA device pair whose PCIe relation sysfs tells: PIX, PXB, PHB, NODE or SYS; GPUDirect RDMA wants PIX or PXB.",
               labels=G + ("device", "relation"), source=SOURCE, claims=_LINKS),
    MetricSpec("gpuwait_gpu_peer_topology_info", "gauge",
               "Always 1; relation names the nearest common PCIe ancestor of two GPUs: PIX (one switch), PXB (several switches), PHB (host bridge), NODE (same NUMA node), SYS (across sockets), BOARD (same board).",
               labels=G + ("peer_gpu", "peer_uuid", "relation"), source=SOURCE, claims=_LINKS),
    MetricSpec("gpuwait_gpu_mig_info", "gauge",
               "Always 1 per MIG device (GPU instance and compute instance) of a GPU in MIG mode.",
               labels=G + ("gpu_instance", "compute_instance", "mig_uuid"), source=SOURCE, claims=("A4", "A13")),
    MetricSpec("gpuwait_gpu_mig_memory_total_bytes", "gauge",
               "Device memory of a MIG device.",
               labels=G + ("gpu_instance", "compute_instance"), unit="bytes", source=SOURCE, claims=_A5),
    MetricSpec("gpuwait_gpu_mig_memory_used_bytes", "gauge",
               "Device memory allocated in a MIG device.",
               labels=G + ("gpu_instance", "compute_instance"), unit="bytes", source=SOURCE, claims=_A5),
    MetricSpec("gpuwait_gpu_mig_sm_active_ratio", "gauge",
               "Fraction of a GPU instance's SMs busy over the latest slow interval (GPM per GPU instance).",
               labels=G + ("gpu_instance",), unit="ratio", source=SOURCE, claims=_UTIL),
    MetricSpec("gpuwait_gpu_mig_tensor_active_ratio", "gauge",
               "Fraction of time a GPU instance's SMs ran tensor-core operations over the latest slow interval (GPM per GPU instance).",
               labels=G + ("gpu_instance",), unit="ratio", source=SOURCE, claims=("A4",)),
    MetricSpec("gpuwait_gpu_mig_dram_active_ratio", "gauge",
               "DRAM bandwidth a GPU instance used relative to the peak over the latest slow interval (GPM per GPU instance).",
               labels=G + ("gpu_instance",), unit="ratio", source=SOURCE, claims=_A5),
    # -- window statistics -----------------------------------------------------------------------
    MetricSpec("gpuwait_gpu_window_utilization_mean_ratio", "gauge",
               "Mean of the driver's utilization samples (sub-second) over the window.",
               labels=G, unit="ratio", source=SOURCE, claims=_UTIL, window=True),
    MetricSpec("gpuwait_gpu_window_utilization_p10_ratio", "gauge",
               "10th percentile of the utilization samples over the window: the dips a mean hides.",
               labels=G, unit="ratio", source=SOURCE, claims=_SPREAD, window=True),
    MetricSpec("gpuwait_gpu_window_utilization_p50_ratio", "gauge",
               "Median of the utilization samples over the window.",
               labels=G, unit="ratio", source=SOURCE, claims=_SPREAD, window=True),
    MetricSpec("gpuwait_gpu_window_utilization_p90_ratio", "gauge",
               "90th percentile of the utilization samples over the window.",
               labels=G, unit="ratio", source=SOURCE, claims=_SPREAD, window=True),
    MetricSpec("gpuwait_gpu_window_idle_ratio", "gauge",
               "Fraction of the window's utilization samples below collector.gpu.idle-threshold (default 0.05): how often the GPU sat waiting.",
               labels=G, unit="ratio", source=SOURCE, claims=_SPREAD, window=True),
    MetricSpec("gpuwait_gpu_window_utilization_samples", "gauge",
               "Utilization samples in the window (one per --sample.interval slot at most); few samples mean coarse statistics.",
               labels=G, source=SOURCE, claims=_HEALTH, window=True),
    MetricSpec("gpuwait_gpu_window_memory_busy_mean_ratio", "gauge",
               "Mean memory-controller busy fraction over the window: the bandwidth proxy, next to (not instead of) memory capacity.",
               labels=G, unit="ratio", source=SOURCE, claims=_A5, window=True),
    MetricSpec("gpuwait_gpu_window_sm_active_mean_ratio", "gauge",
               "Mean fraction of SMs busy over the window (GPM; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=_UTIL, window=True),
    MetricSpec("gpuwait_gpu_window_sm_occupancy_mean_ratio", "gauge",
               "Mean SM occupancy over the window (GPM; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=("A4",), window=True),
    MetricSpec("gpuwait_gpu_window_tensor_active_mean_ratio", "gauge",
               "Mean tensor-core activity over the window (GPM; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=("A4",), window=True),
    MetricSpec("gpuwait_gpu_window_dram_active_mean_ratio", "gauge",
               "Mean DRAM bandwidth use relative to the peak over the window (GPM; Hopper and newer).",
               labels=G, unit="ratio", source=SOURCE, claims=_A5, window=True),
    MetricSpec("gpuwait_gpu_window_pcie_throughput_bytes_per_second", "gauge",
               "PCIe throughput by direction over the window, from the byte counters where the GPU has them, else the mean of GPM's rates.",
               labels=G + ("direction",), unit="bytes", source=SOURCE, claims=_A9, window=True),
    MetricSpec("gpuwait_gpu_window_nvlink_throughput_bytes_per_second", "gauge",
               "Mean NVLink throughput over all links by direction over the window (GPM; Hopper and newer).",
               labels=G + ("direction",), unit="bytes", source=SOURCE, claims=_LINKS, window=True),
    MetricSpec("gpuwait_gpu_window_clocks_event_ratio", "gauge",
               "Fraction of the window's fast ticks in which each clock-event reason held; power and thermal reasons above zero mean the GPU was throttled.",
               labels=G + ("reason",), unit="ratio", source=SOURCE, claims=_HEALTH, window=True),
)


_GPM_GAUGES = (
    ("sm_active", "gpuwait_gpu_sm_active_ratio"),
    ("sm_occupancy", "gpuwait_gpu_sm_occupancy_ratio"),
    ("tensor_active", "gpuwait_gpu_tensor_active_ratio"),
    ("dram_active", "gpuwait_gpu_dram_active_ratio"),
)
_MIG_GPM_GAUGES = (
    ("sm_active", "gpuwait_gpu_mig_sm_active_ratio"),
    ("tensor_active", "gpuwait_gpu_mig_tensor_active_ratio"),
    ("dram_active", "gpuwait_gpu_mig_dram_active_ratio"),
)


def _flag(value: bool | None) -> str:
    return "" if value is None else ("enabled" if value else "disabled")


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    fast_reading, window = snapshots["gpu"]
    slow_reading, _ = snapshots["gpu_device"]
    fast: GpuFastData | None = fast_reading.data if fast_reading is not None else None
    slow: GpuDeviceData | None = slow_reading.data if slow_reading is not None else None
    if fast is None and slow is None:
        return
    newest = max((r for r in (fast_reading, slow_reading) if r is not None), key=lambda r: r.t).data
    yield Sample("gpuwait_gpu_backend_up", (), 1.0 if newest.backend_up else 0.0)

    ups: dict[tuple[str, str], bool] = {}
    for gpus in ((slow.gpus if slow else ()), (fast.gpus if fast else ())):
        for g in gpus:  # the fast tick, read later, has the last word
            ups[(str(g.index), g.uuid)] = g.up
    for labels, up in sorted(ups.items()):
        yield Sample("gpuwait_gpu_up", labels, 1.0 if up else 0.0)

    if fast is not None:
        yield from _fast(fast)
    if slow is not None:
        yield from _slow(slow, has_gpm_pcie={(str(g.index), g.uuid) for g in (fast.gpus if fast else ())
                                            if "pcie_tx_bytes_per_second" in g.gpm})
    if window is not None:
        # A GPU that is down now has only gpuwait_gpu_up: its window would describe the past.
        yield from _window(window, down={labels for labels, up in ups.items() if not up})


def _fast(data: GpuFastData) -> Iterator[Sample]:
    for g in data.gpus:
        if not g.up:
            continue
        labels = (str(g.index), g.uuid)
        yield Sample("gpuwait_gpu_utilization_ratio", labels, g.utilization)
        yield Sample("gpuwait_gpu_memory_busy_ratio", labels, g.memory_busy)
        for key, name in _GPM_GAUGES:
            yield Sample(name, labels, g.gpm.get(key))
        yield Sample("gpuwait_gpu_pcie_bytes_total", labels + ("tx",), g.pcie_tx_bytes)
        yield Sample("gpuwait_gpu_pcie_bytes_total", labels + ("rx",), g.pcie_rx_bytes)
        yield Sample("gpuwait_gpu_pcie_throughput_bytes_per_second", labels + ("tx",), g.gpm.get("pcie_tx_bytes_per_second"))
        yield Sample("gpuwait_gpu_pcie_throughput_bytes_per_second", labels + ("rx",), g.gpm.get("pcie_rx_bytes_per_second"))
        yield Sample("gpuwait_gpu_nvlink_throughput_bytes_per_second", labels + ("tx",), g.gpm.get("nvlink_tx_bytes_per_second"))
        yield Sample("gpuwait_gpu_nvlink_throughput_bytes_per_second", labels + ("rx",), g.gpm.get("nvlink_rx_bytes_per_second"))
        if g.clocks_event_reasons is not None:
            for bit, reason in CLOCK_EVENT_REASONS:
                yield Sample("gpuwait_gpu_clocks_event_reason_active", labels + (reason,),
                             1.0 if g.clocks_event_reasons & bit else 0.0)


def _slow(data: GpuDeviceData, has_gpm_pcie: set[tuple[str, str]]) -> Iterator[Sample]:
    index_of = {g.uuid: str(g.index) for g in data.gpus}
    for g in data.gpus:
        labels = (str(g.index), g.uuid)
        if g.info is not None:
            info = g.info
            yield Sample("gpuwait_gpu_info", labels + (
                info.name, info.pci_bus_id, data.driver_version, data.cuda_version,
                "" if info.numa_node is None else str(info.numa_node),
                _flag(info.mig_mode), _flag(info.persistence_mode), info.architecture,
            ), 1.0)
        for (call, error), count in sorted(data.nvml_errors.get((g.index, g.uuid), {}).items()):
            yield Sample("gpuwait_gpu_nvml_errors_total", labels + (call, error), count)
        if not g.up:
            continue
        if g.memory is not None:
            yield Sample("gpuwait_gpu_memory_total_bytes", labels, g.memory.total)
            yield Sample("gpuwait_gpu_memory_used_bytes", labels, g.memory.used)
            yield Sample("gpuwait_gpu_memory_reserved_bytes", labels, g.memory.reserved)
        if g.pcie is not None:
            yield Sample("gpuwait_gpu_pcie_link_generation", labels, g.pcie.generation)
            yield Sample("gpuwait_gpu_pcie_link_max_generation", labels, g.pcie.max_generation)
            yield Sample("gpuwait_gpu_pcie_link_gpu_max_generation", labels, g.pcie.gpu_max_generation)
            yield Sample("gpuwait_gpu_pcie_link_width", labels, g.pcie.width)
            yield Sample("gpuwait_gpu_pcie_link_max_width", labels, g.pcie.max_width)
            yield Sample("gpuwait_gpu_pcie_link_capacity_bytes_per_second", labels,
                         pcie_link_capacity(g.pcie.generation, g.pcie.width))
        yield Sample("gpuwait_gpu_pcie_replays_total", labels, g.pcie_replays)
        if g.pcie_throughput is not None and labels not in has_gpm_pcie:
            yield Sample("gpuwait_gpu_pcie_throughput_bytes_per_second", labels + ("tx",), g.pcie_throughput[0])
            yield Sample("gpuwait_gpu_pcie_throughput_bytes_per_second", labels + ("rx",), g.pcie_throughput[1])
        for link in g.nvlinks:
            link_labels = labels + (str(link.link),)
            yield Sample("gpuwait_gpu_nvlink_up", link_labels, None if link.up is None else float(link.up))
            yield Sample("gpuwait_gpu_nvlink_bytes_total", link_labels + ("tx",), link.tx_bytes)
            yield Sample("gpuwait_gpu_nvlink_bytes_total", link_labels + ("rx",), link.rx_bytes)
            for counter, count in link.errors.items():
                yield Sample("gpuwait_gpu_nvlink_errors_total", link_labels + (counter,), count)
        for clock, hertz in g.clocks.items():
            yield Sample("gpuwait_gpu_clock_hertz", labels + (clock,), hertz)
        yield Sample("gpuwait_gpu_power_watts", labels, g.power_watts)
        yield Sample("gpuwait_gpu_power_limit_watts", labels, g.power_limit_watts)
        yield Sample("gpuwait_gpu_energy_joules_total", labels, g.energy_joules)
        yield Sample("gpuwait_gpu_temperature_celsius", labels, g.temperature_celsius)
        for policy, seconds in g.violation_seconds.items():
            yield Sample("gpuwait_gpu_clocks_violation_seconds_total", labels + (policy,), seconds)
        for code, count in sorted(g.xids.items()):
            yield Sample("gpuwait_gpu_xid_errors_total", labels + (str(code),), count)
        if g.processes is not None:
            yield Sample("gpuwait_gpu_processes", labels, len(g.processes))
        for use in g.owners:
            owner = data.owners.get(use.owner)
            if owner is not None:
                yield Sample("gpuwait_gpu_owner_info", labels + info_label_values(owner.labels), 1.0)
            for container_id, container in use.containers:
                yield Sample("gpuwait_gpu_owner_container_info", labels + (use.owner, container_id, container), 1.0)
            yield Sample("gpuwait_gpu_owner_processes", labels + (use.owner,), use.processes)
            yield Sample("gpuwait_gpu_owner_memory_used_bytes", labels + (use.owner,), use.memory_bytes)
            yield Sample("gpuwait_gpu_owner_utilization_ratio", labels + (use.owner,), use.utilization)
        for device, relation in sorted(g.nics.items()):
            yield Sample("gpuwait_gpu_nic_topology_info", labels + (device, relation), 1.0)
        for peer_uuid, relation in sorted(g.peers.items()):
            peer_index = index_of.get(peer_uuid)
            if peer_index is not None:
                yield Sample("gpuwait_gpu_peer_topology_info", labels + (peer_index, peer_uuid, relation), 1.0)
        for mig in g.mig:
            instance = (str(mig.gpu_instance), str(mig.compute_instance))
            yield Sample("gpuwait_gpu_mig_info", labels + instance + (mig.uuid,), 1.0)
            if mig.memory is not None:
                yield Sample("gpuwait_gpu_mig_memory_total_bytes", labels + instance, mig.memory.total)
                yield Sample("gpuwait_gpu_mig_memory_used_bytes", labels + instance, mig.memory.used)
        for gi, metrics in sorted(g.mig_gpm.items()):
            for key, name in _MIG_GPM_GAUGES:
                yield Sample(name, labels + (str(gi),), metrics.get(key))
    if data.kubelet is not None:
        yield from _kubelet(data.kubelet)
    for owner_id, owner in data.owners.items():
        yield Sample("gpuwait_gpu_owner_host_processes", (owner_id,), owner.processes)
        for state in ("running", "blocked", "sleeping", "other"):
            yield Sample("gpuwait_gpu_owner_threads", (owner_id, state), getattr(owner, state))
        yield Sample("gpuwait_gpu_owner_cpus", (owner_id, "all"), owner.cpus)
        yield Sample("gpuwait_gpu_owner_cpus", (owner_id, "running"), owner.running_cpus)
        yield Sample("gpuwait_gpu_owner_cpu_seconds_total", (owner_id,), owner.cpu_seconds_total)


def _kubelet(status: KubeletStatus) -> Iterator[Sample]:
    if status.up is not None:
        yield Sample("gpuwait_kubelet_up", (), 1.0 if status.up else 0.0)
    yield Sample("gpuwait_kubelet_pods", (), status.pods)
    yield Sample("gpuwait_kubelet_requests_total", (), status.requests)
    for cause, count in sorted(status.errors.items()):
        yield Sample("gpuwait_kubelet_errors_total", (cause,), count)


def _window(stats: GpuWindowStats, down: set[tuple[str, str]]) -> Iterator[Sample]:
    for w in stats.gpus:
        labels = (w.index, w.uuid)
        if labels in down:
            continue
        yield Sample("gpuwait_gpu_window_utilization_mean_ratio", labels, w.utilization_mean)
        yield Sample("gpuwait_gpu_window_utilization_p10_ratio", labels, w.utilization_p10)
        yield Sample("gpuwait_gpu_window_utilization_p50_ratio", labels, w.utilization_p50)
        yield Sample("gpuwait_gpu_window_utilization_p90_ratio", labels, w.utilization_p90)
        yield Sample("gpuwait_gpu_window_idle_ratio", labels, w.idle_ratio)
        if w.utilization_samples:
            yield Sample("gpuwait_gpu_window_utilization_samples", labels, w.utilization_samples)
        yield Sample("gpuwait_gpu_window_memory_busy_mean_ratio", labels, w.memory_busy_mean)
        yield Sample("gpuwait_gpu_window_sm_active_mean_ratio", labels, w.sm_active_mean)
        yield Sample("gpuwait_gpu_window_sm_occupancy_mean_ratio", labels, w.sm_occupancy_mean)
        yield Sample("gpuwait_gpu_window_tensor_active_mean_ratio", labels, w.tensor_active_mean)
        yield Sample("gpuwait_gpu_window_dram_active_mean_ratio", labels, w.dram_active_mean)
        for direction, rate in w.pcie_rate.items():
            yield Sample("gpuwait_gpu_window_pcie_throughput_bytes_per_second", labels + (direction,), rate)
        for direction, rate in w.nvlink_rate.items():
            yield Sample("gpuwait_gpu_window_nvlink_throughput_bytes_per_second", labels + (direction,), rate)
        for reason, ratio in w.clocks_event_ratio.items():
            yield Sample("gpuwait_gpu_window_clocks_event_ratio", labels + (reason,), ratio)
