"""Metrics of the netdev collector."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.netdev.payload import NetDev
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "netdev"
_CLAIMS = ("A9", "A10")
_IF = ("interface",)


def _counter(name: str, help: str, unit: str = "") -> MetricSpec:
    return MetricSpec(name, "counter", help, labels=_IF, unit=unit, source=SOURCE, claims=_CLAIMS)


def _window(name: str, help: str, unit: str = "") -> MetricSpec:
    return MetricSpec(name, "gauge", help, labels=_IF, unit=unit, source=SOURCE, claims=_CLAIMS, window=True)


METRICS = (
    _counter("gpuwait_network_receive_bytes_total", "Bytes received, from /proc/net/dev.", unit="bytes"),
    _counter("gpuwait_network_transmit_bytes_total", "Bytes transmitted, from /proc/net/dev.", unit="bytes"),
    _counter("gpuwait_network_receive_packets_total", "Packets received."),
    _counter("gpuwait_network_transmit_packets_total", "Packets transmitted."),
    _counter("gpuwait_network_receive_errors_total", "Receive errors the driver counted."),
    _counter("gpuwait_network_transmit_errors_total", "Transmit errors the driver counted."),
    _counter("gpuwait_network_receive_drops_total", "Received packets dropped (no buffer, or unwanted), as the driver counted them."),
    _counter("gpuwait_network_transmit_drops_total", "Packets dropped on transmit, as the driver counted them."),
    _window("gpuwait_network_window_receive_mean_bytes_per_second", "Bytes received per second over the window.", unit="bytes"),
    _window("gpuwait_network_window_transmit_mean_bytes_per_second", "Bytes transmitted per second over the window.", unit="bytes"),
    _window("gpuwait_network_window_receive_max_bytes_per_second", "Largest receive rate over any one sample interval of the window: the peak of a burst.", unit="bytes"),
    _window("gpuwait_network_window_transmit_max_bytes_per_second", "Largest transmit rate over any one sample interval of the window: the peak of a burst.", unit="bytes"),
    _window("gpuwait_network_window_receive_burstiness", "Coefficient of variation of the receive rate over the sample intervals of the window: near 0 for steady traffic, above 1 for bursts between idle gaps."),
    _window("gpuwait_network_window_transmit_burstiness", "Coefficient of variation of the transmit rate over the sample intervals of the window: near 0 for steady traffic, above 1 for bursts between idle gaps."),
)


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
