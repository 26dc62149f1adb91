"""Metrics of the netdev collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors import CollectorSpec, Sample, Snapshot, SourceSpec
from gpuwait.config import Settings
from gpuwait.parsers.netdev import NetDev
from gpuwait.sources.base import HostPaths
from gpuwait.sources.netdev import NetdevSource
from gpuwait.stats import netdev as netdev_stats

#: Metric name -> InterfaceCounters field.
COUNTERS = (
    ("gpuwait_network_receive_bytes_total", "receive_bytes"),
    ("gpuwait_network_transmit_bytes_total", "transmit_bytes"),
    ("gpuwait_network_receive_packets_total", "receive_packets"),
    ("gpuwait_network_transmit_packets_total", "transmit_packets"),
    ("gpuwait_network_receive_errors_total", "receive_errors"),
    ("gpuwait_network_transmit_errors_total", "transmit_errors"),
    ("gpuwait_network_receive_drops_total", "receive_drops"),
    ("gpuwait_network_transmit_drops_total", "transmit_drops"),
)


def expose(snapshots: Mapping[str, Snapshot], settings: Settings) -> Iterator[Sample]:
    reading, stats = snapshots["netdev"]
    if reading is not None:
        data: NetDev = reading.data
        for name, field in COUNTERS:
            for interface, counters in data.interfaces.items():
                yield Sample(name, (interface,), getattr(counters, field))
    if stats is not None:
        for direction, by_interface in (("receive", stats.receive), ("transmit", stats.transmit)):
            prefix = f"gpuwait_network_window_{direction}"
            for interface, window in by_interface.items():
                yield Sample(f"{prefix}_mean_bytes_per_second", (interface,), window.mean_bytes_per_second)
                yield Sample(f"{prefix}_max_bytes_per_second", (interface,), window.max_bytes_per_second)
                yield Sample(f"{prefix}_burstiness", (interface,), window.burstiness)


COLLECTOR = CollectorSpec(
    name="netdev",
    help="Network interface throughput, peaks and burstiness at the sample rate (A9, A10).",
    sources=(SourceSpec("netdev", lambda s: NetdevSource(HostPaths.from_settings(s), s["collector.netdev.device-exclude"]),
                        netdev_stats.columns, netdev_stats.summarize, payload=NetDev),),
    expose=expose,
)
