"""Metrics of the rdma collector: InfiniBand and RoCE ports, every series labelled with its
link layer (A11)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpuwait.collectors.rdma.parse import DATA_WORD_BYTES, is_active
from gpuwait.collectors.rdma.payload import RdmaData, RdmaTrafficData
from gpuwait.collectors.rdma.window import LEGACY_COUNTER_MAX, RdmaWindowStats, packets
from gpuwait.core.config import Settings
from gpuwait.core.metric import MetricSpec
from gpuwait.core.plugin import Sample, Snapshot

SOURCE = "rdma"
PORT = ("device", "port", "link_layer")
_TRAFFIC = ("A9", "A10", "A11")
_HEALTH = ("A10", "A11")

#: counters/<file> -> (metric, help). IBTA PortCounters error fields saturate at 4 to 16 bits;
#: a value stuck at its maximum means "at least this many".
ERROR_COUNTERS = {
    "symbol_error": ("gpuwait_rdma_port_symbol_errors_total",
                     "Minor link errors detected on a physical lane (counters/symbol_error)."),
    "link_error_recovery": ("gpuwait_rdma_port_link_error_recoveries_total",
                            "Times the link error recovery process completed (counters/link_error_recovery)."),
    "link_downed": ("gpuwait_rdma_port_link_downed_total",
                    "Times the link failed recovery and went down (counters/link_downed)."),
    "port_rcv_errors": ("gpuwait_rdma_port_receive_errors_total",
                        "Received packets containing an error (counters/port_rcv_errors)."),
    "port_rcv_remote_physical_errors": ("gpuwait_rdma_port_receive_remote_physical_errors_total",
                                        "Received packets marked with the EBP delimiter by the sender (counters/port_rcv_remote_physical_errors)."),
    "port_rcv_switch_relay_errors": ("gpuwait_rdma_port_receive_switch_relay_errors_total",
                                     "Received packets discarded because they could not be forwarded (counters/port_rcv_switch_relay_errors)."),
    "port_xmit_discards": ("gpuwait_rdma_port_transmit_discards_total",
                           "Outbound packets discarded because the port was down or congested (counters/port_xmit_discards)."),
    "port_xmit_constraint_errors": ("gpuwait_rdma_port_transmit_constraint_errors_total",
                                    "Packets not transmitted because of outbound raw filtering or a failed partition check (counters/port_xmit_constraint_errors)."),
    "port_rcv_constraint_errors": ("gpuwait_rdma_port_receive_constraint_errors_total",
                                   "Packets received and discarded because of inbound raw filtering or a failed partition check (counters/port_rcv_constraint_errors)."),
    "local_link_integrity_errors": ("gpuwait_rdma_port_local_link_integrity_errors_total",
                                    "Times local physical errors exceeded the threshold (counters/local_link_integrity_errors)."),
    "excessive_buffer_overrun_errors": ("gpuwait_rdma_port_excessive_buffer_overrun_errors_total",
                                        "Times consecutive receive buffer overruns exceeded the threshold (counters/excessive_buffer_overrun_errors)."),
    "VL15_dropped": ("gpuwait_rdma_port_vl15_dropped_total",
                     "Subnet management packets dropped for lack of buffers (counters/VL15_dropped)."),
    "port_xmit_wait": ("gpuwait_rdma_port_transmit_wait_ticks_total",
                       "Ticks in which the port had data to send but no flow-control credits: congestion back-pressure from the fabric, in the HCA's sampling ticks, not seconds (counters/port_xmit_wait)."),
}

#: counters/<file> -> (metric, help) of the packet counters only PortCountersExtended has.
CAST_COUNTERS = {
    "unicast_xmit_packets": ("gpuwait_rdma_port_unicast_transmit_packets_total",
                             "Unicast packets transmitted (counters/unicast_xmit_packets)."),
    "unicast_rcv_packets": ("gpuwait_rdma_port_unicast_receive_packets_total",
                            "Unicast packets received (counters/unicast_rcv_packets)."),
    "multicast_xmit_packets": ("gpuwait_rdma_port_multicast_transmit_packets_total",
                               "Multicast packets transmitted (counters/multicast_xmit_packets)."),
    "multicast_rcv_packets": ("gpuwait_rdma_port_multicast_receive_packets_total",
                              "Multicast packets received (counters/multicast_rcv_packets)."),
}

_WINDOW_RATE = "per second over each --sample.interval"

METRICS = (
    MetricSpec("gpuwait_rdma_device_info", "gauge",
               "Always 1 per RDMA device: its PCI function and NUMA node (for GPU-NIC affinity), GUID, firmware and HCA type; link_layer lists its ports' link layers, comma-separated.",
               labels=("device", "link_layer", "pci_address", "numa_node", "node_guid", "firmware_version", "hca_type", "board_id"),
               source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_info", "gauge",
               "Always 1 per RDMA port: its link layer (InfiniBand, or Ethernet for RoCE), its network interface (RoCE netdev or IPoIB, empty if none) and negotiated lane width and speed.",
               labels=(*PORT, "netdev", "link_width", "link_speed"), source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_state", "gauge",
               "Logical port state as the kernel reports it: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
               labels=PORT, source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_physical_state", "gauge",
               "Physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.",
               labels=PORT, source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_active", "gauge",
               "1 when the port's logical state is ACTIVE (or ACTIVE_DEFER) and it can carry traffic, else 0.",
               labels=PORT, source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_rate_bytes_per_second", "gauge",
               "Negotiated link data rate in bytes per second (ports/<n>/rate).",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC),
    MetricSpec("gpuwait_rdma_port_transmit_bytes_total", "counter",
               "Bytes transmitted by the port (4 x counters/port_xmit_data), read every --sample.interval.",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC),
    MetricSpec("gpuwait_rdma_port_receive_bytes_total", "counter",
               "Bytes received by the port (4 x counters/port_rcv_data), read every --sample.interval.",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC),
    MetricSpec("gpuwait_rdma_port_transmit_packets_total", "counter",
               "Packets transmitted by the port (counters/port_xmit_packets).",
               labels=PORT, source=SOURCE, claims=_TRAFFIC),
    MetricSpec("gpuwait_rdma_port_receive_packets_total", "counter",
               "Packets received by the port (counters/port_rcv_packets).",
               labels=PORT, source=SOURCE, claims=_TRAFFIC),
    MetricSpec("gpuwait_rdma_port_traffic_counters_saturated", "gauge",
               "How many of the port's four data and packet counters are stuck at the 32-bit maximum (an HCA without 64-bit extended counters that saturated); their rates are not published until the counters are reset.",
               labels=PORT, source=SOURCE, claims=_TRAFFIC),
    *(MetricSpec(name, "counter", help, labels=PORT, source=SOURCE, claims=_HEALTH)
      for name, help in (*ERROR_COUNTERS.values(), *CAST_COUNTERS.values())),
    MetricSpec("gpuwait_rdma_port_hw_events_total", "counter",
               "Driver-specific port counters from ports/<n>/hw_counters, by file name (mlx5 RoCE congestion: np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled; retransmits and timeouts: packet_seq_err, out_of_sequence, local_ack_timeout_err, roce_adp_retrans; receive buffer exhaustion: out_of_buffer).",
               labels=(*PORT, "counter"), source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_hw_resources", "gauge",
               "Driver-specific port values from ports/<n>/hw_counters that are levels, not counts (active_* resources in use, watermark_* high-water marks, as bnxt_re reports them).",
               labels=(*PORT, "counter"), source=SOURCE, claims=_HEALTH),
    MetricSpec("gpuwait_rdma_port_window_transmit_mean_bytes_per_second", "gauge",
               "Mean transmit rate of the port over the window, in bytes per second.",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_transmit_max_bytes_per_second", "gauge",
               f"Highest transmit rate of the port in any sampling interval of the window, in bytes {_WINDOW_RATE}.",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_transmit_burstiness", "gauge",
               "Coefficient of variation of the port's per-interval transmit rates over the window: near 0 for steady traffic, above 1 for bursts such as collectives between compute phases.",
               labels=PORT, source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_receive_mean_bytes_per_second", "gauge",
               "Mean receive rate of the port over the window, in bytes per second.",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_receive_max_bytes_per_second", "gauge",
               f"Highest receive rate of the port in any sampling interval of the window, in bytes {_WINDOW_RATE}.",
               labels=PORT, unit="bytes", source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_receive_burstiness", "gauge",
               "Coefficient of variation of the port's per-interval receive rates over the window: near 0 for steady traffic, above 1 for bursts such as collectives between compute phases.",
               labels=PORT, source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_transmit_mean_packets_per_second", "gauge",
               "Mean packets transmitted per second by the port over the window.",
               labels=PORT, source=SOURCE, claims=_TRAFFIC, window=True),
    MetricSpec("gpuwait_rdma_port_window_receive_mean_packets_per_second", "gauge",
               "Mean packets received per second by the port over the window.",
               labels=PORT, source=SOURCE, claims=_TRAFFIC, window=True),
)


#: hw_counters whose names say they are levels, not running counts (bnxt_re).
HW_GAUGE_PREFIXES = ("active_", "watermark_")

_SATURATED_DATA = LEGACY_COUNTER_MAX * DATA_WORD_BYTES


def _traffic(data: RdmaTrafficData, stats: RdmaWindowStats | None,
             details: RdmaData | None, packet_stats: RdmaWindowStats | None) -> Iterator[Sample]:
    """The fast tier's data counters with the slow tier's packet counters (``details``, and
    their window ``packet_stats``), unless the traffic reading carries its own (a trace
    recorded when the fast tier read them)."""
    slow = {(d.device, p.port, p.link_layer): packets(p) for d in details.devices for p in d.ports} if details is not None else {}
    present = set()
    for p in data.ports:
        key = (p.device, p.port, p.link_layer)
        labels = (p.device, str(p.port), p.link_layer)
        present.add(key)
        tx_packets, rx_packets = p.transmit_packets, p.receive_packets
        if tx_packets is None and rx_packets is None:
            tx_packets, rx_packets = slow.get(key, (None, None))
        yield Sample("gpuwait_rdma_port_transmit_bytes_total", labels, p.transmit_bytes)
        yield Sample("gpuwait_rdma_port_receive_bytes_total", labels, p.receive_bytes)
        yield Sample("gpuwait_rdma_port_transmit_packets_total", labels, tx_packets)
        yield Sample("gpuwait_rdma_port_receive_packets_total", labels, rx_packets)
        read = [(p.transmit_bytes, _SATURATED_DATA), (p.receive_bytes, _SATURATED_DATA),
                (tx_packets, LEGACY_COUNTER_MAX), (rx_packets, LEGACY_COUNTER_MAX)]
        if any(v is not None for v, _ in read):
            yield Sample("gpuwait_rdma_port_traffic_counters_saturated", labels, sum(1 for v, stuck in read if v == stuck))
    byte_ports = stats.ports if stats is not None else {}
    packet_ports = packet_stats.ports if packet_stats is not None else {}
    # The window still holds samples of a port unplugged moments ago; its series go with it.
    for key in sorted((byte_ports.keys() | packet_ports.keys()) & present):
        s, q = byte_ports.get(key), packet_ports.get(key)
        labels = (key[0], str(key[1]), key[2])
        if s is not None:
            yield Sample("gpuwait_rdma_port_window_transmit_mean_bytes_per_second", labels, s.transmit_bytes_mean)
            yield Sample("gpuwait_rdma_port_window_transmit_max_bytes_per_second", labels, s.transmit_bytes_max)
            yield Sample("gpuwait_rdma_port_window_transmit_burstiness", labels, s.transmit_burstiness)
            yield Sample("gpuwait_rdma_port_window_receive_mean_bytes_per_second", labels, s.receive_bytes_mean)
            yield Sample("gpuwait_rdma_port_window_receive_max_bytes_per_second", labels, s.receive_bytes_max)
            yield Sample("gpuwait_rdma_port_window_receive_burstiness", labels, s.receive_burstiness)
        tx_mean = s.transmit_packets_mean if s is not None else None
        rx_mean = s.receive_packets_mean if s is not None else None
        if tx_mean is None and rx_mean is None and q is not None:
            tx_mean, rx_mean = q.transmit_packets_mean, q.receive_packets_mean
        yield Sample("gpuwait_rdma_port_window_transmit_mean_packets_per_second", labels, tx_mean)
        yield Sample("gpuwait_rdma_port_window_receive_mean_packets_per_second", labels, rx_mean)


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
    details, packet_stats = snapshots["rdma"]
    if traffic is not None:
        yield from _traffic(traffic.data, stats, details.data if details is not None else None, packet_stats)
    if details is not None:
        yield from _details(details.data)
