"""Metrics of the rdma collector: InfiniBand and RoCE ports, every series labelled with its
link layer (A11)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.catalog.rdma import CAST_COUNTERS, ERROR_COUNTERS
from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.parsers.rdma import is_active
from gpuwait.sources.base import HostPaths
from gpuwait.sources.rdma import DATA_WORD_BYTES, RdmaData, RdmaSource, RdmaTrafficData, RdmaTrafficSource
from gpuwait.stats import rdma as rdma_stats
from gpuwait.stats.rdma import LEGACY_COUNTER_MAX, RdmaWindowStats

#: hw_counters whose names say they are levels, not running counts (bnxt_re).
HW_GAUGE_PREFIXES = ("active_", "watermark_")

_SATURATED_DATA = LEGACY_COUNTER_MAX * DATA_WORD_BYTES


def _traffic(data: RdmaTrafficData, stats: RdmaWindowStats | None) -> Iterator[Sample]:
    present = set()
    for p in data.ports:
        labels = (p.device, str(p.port), p.link_layer)
        present.add((p.device, p.port, p.link_layer))
        yield Sample("gpuwait_rdma_port_transmit_bytes_total", labels, p.transmit_bytes)
        yield Sample("gpuwait_rdma_port_receive_bytes_total", labels, p.receive_bytes)
        yield Sample("gpuwait_rdma_port_transmit_packets_total", labels, p.transmit_packets)
        yield Sample("gpuwait_rdma_port_receive_packets_total", labels, p.receive_packets)
        read = [(p.transmit_bytes, _SATURATED_DATA), (p.receive_bytes, _SATURATED_DATA),
                (p.transmit_packets, LEGACY_COUNTER_MAX), (p.receive_packets, LEGACY_COUNTER_MAX)]
        if any(v is not None for v, _ in read):
            yield Sample("gpuwait_rdma_port_traffic_counters_saturated", labels, sum(1 for v, stuck in read if v == stuck))
    if stats is None:
        return
    # The window still holds samples of a port unplugged moments ago; its series go with it.
    for key, s in stats.ports.items():
        if key not in present:
            continue
        labels = (key[0], str(key[1]), key[2])
        yield Sample("gpuwait_rdma_port_window_transmit_mean_bytes_per_second", labels, s.transmit_bytes_mean)
        yield Sample("gpuwait_rdma_port_window_transmit_max_bytes_per_second", labels, s.transmit_bytes_max)
        yield Sample("gpuwait_rdma_port_window_transmit_burstiness", labels, s.transmit_burstiness)
        yield Sample("gpuwait_rdma_port_window_receive_mean_bytes_per_second", labels, s.receive_bytes_mean)
        yield Sample("gpuwait_rdma_port_window_receive_max_bytes_per_second", labels, s.receive_bytes_max)
        yield Sample("gpuwait_rdma_port_window_receive_burstiness", labels, s.receive_burstiness)
        yield Sample("gpuwait_rdma_port_window_transmit_mean_packets_per_second", labels, s.transmit_packets_mean)
        yield Sample("gpuwait_rdma_port_window_receive_mean_packets_per_second", labels, s.receive_packets_mean)


def _details(data: RdmaData) -> Iterator[Sample]:
    for dev in data.devices:
        link_layers = ",".join(sorted({p.link_layer for p in dev.ports}))
        yield Sample("gpuwait_rdma_device_info", (
            dev.device, link_layers, dev.pci_address, str(dev.numa_node), dev.node_guid,
            dev.firmware_version, dev.hca_type, dev.board_id,
        ), 1)
        for port in dev.ports:
            labels = (dev.device, str(port.port), port.link_layer)
            yield Sample("gpuwait_rdma_port_info", (*labels, port.netdev, port.link_width, port.link_speed), 1)
            yield Sample("gpuwait_rdma_port_state", labels, port.state)
            yield Sample("gpuwait_rdma_port_physical_state", labels, port.physical_state)
            if port.state is not None:
                yield Sample("gpuwait_rdma_port_active", labels, 1 if is_active(port.state) else 0)
            yield Sample("gpuwait_rdma_port_rate_bytes_per_second", labels, port.rate_bytes_per_second)
            for counter, (name, _) in ERROR_COUNTERS.items():
                yield Sample(name, labels, port.counters.get(counter))
            for counter, (name, _) in CAST_COUNTERS.items():
                yield Sample(name, labels, port.counters.get(counter))
            for counter, value in port.hw_counters.items():
                name = "gpuwait_rdma_port_hw_resources" if counter.startswith(HW_GAUGE_PREFIXES) else "gpuwait_rdma_port_hw_events_total"
                yield Sample(name, (*labels, counter), value)


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    traffic, stats = snapshots["rdma_traffic"]
    if traffic is not None:
        yield from _traffic(traffic.data, stats)
    details, _ = snapshots["rdma"]
    if details is not None:
        yield from _details(details.data)


COLLECTOR = CollectorSpec(
    name="rdma",
    help="InfiniBand and RoCE ports: traffic sampled with the GPUs, state, rate, error, congestion and retransmit counters, PCI function and NUMA node (A9, A10, A11).",
    sources=(
        SourceSpec("rdma_traffic", lambda s: RdmaTrafficSource(HostPaths.from_settings(s)),
                   rdma_stats.columns, rdma_stats.summarize, tier="fast", payload=RdmaTrafficData),
        SourceSpec("rdma", lambda s: RdmaSource(HostPaths.from_settings(s)), tier="slow", payload=RdmaData),
    ),
    expose=expose,
)
