"""Metrics of the gpu collector (sources ``gpu`` and ``gpu_device``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.kubelet import KubeletStatus
from gpuwait.nvml.values import CLOCK_EVENT_REASONS
from gpuwait.parsers.cgroup import LABEL_NAMES as OWNER_LABELS
from gpuwait.sources import gpu as gpu_sources
from gpuwait.sources.gpu import GpuDeviceData, GpuFastData
from gpuwait.stats import gpu as gpu_stats

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
                yield Sample("gpuwait_gpu_owner_info", labels + tuple(owner.labels[name] for name in OWNER_LABELS), 1.0)
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


def _window(stats: gpu_stats.GpuWindowStats, down: set[tuple[str, str]]) -> Iterator[Sample]:
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


COLLECTOR = CollectorSpec(
    name="gpu",
    help="NVIDIA GPUs through NVML: sub-second utilization, GPM activity, memory, PCIe, NVLink, clocks, power, XIDs, processes and topology.",
    sources=(
        SourceSpec("gpu", gpu_sources.make_fast, summarize=gpu_stats.summarize, rows=gpu_sources.fast_rows,
                   payload=GpuFastData),
        SourceSpec("gpu_device", gpu_sources.make_slow, columns=gpu_stats.device_columns, payload=GpuDeviceData),
    ),
    expose=expose,
)
