from gpuwait.catalog.spec import MetricSpec

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
