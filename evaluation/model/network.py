"""Ethernet interfaces (/proc/net/dev) and RDMA ports (/sys/class/infiniband).

A NIC carries at most its line rate each way; flows take what they need in the order they
are stepped. Packets follow from the bytes and the MTU.

An RDMA port's data counters count what the collectives move (IBTA PortXmitData/PortRcvData,
read in 4-octet words and exposed here in bytes, as gpuwait's source converts them). On
InfiniBand, congestion shows as PortXmitWait: ticks in which the port had data to send but no
credits (NVIDIA ibdiagnet manual, "Congestion Assessment on InfiniBand Links"). On RoCE, a
congested switch marks packets with ECN; the receiving NIC (notification point) counts them
(np_ecn_marked_roce_packets) and answers with CNPs (np_cnp_sent) that the sender (reaction
point) handles by slowing down (rp_cnp_handled) (Linux commit "IB/mlx5: Support congestion
related counters"). RDMA traffic of an mlx5 RoCE port is offloaded and does not pass through
the kernel's network stack, so the netdev's /proc/net/dev counters do not count it (mlx5
ethtool documentation: RDMA traffic is counted in the vport_rdma counters only).
"""

from __future__ import annotations


class Nic:
    def __init__(self, name: str, rate_bytes: float, mtu: int, rng, uptime: float) -> None:
        self.name = name
        self.rate = rate_bytes
        self.mtu = mtu
        self._rx_used = 0.0
        self._tx_used = 0.0
        base = int(uptime * rng.uniform(1e4, 1e6))
        self.c = {"receive_bytes": base, "receive_packets": base // 1200, "transmit_bytes": base // 3,
                  "transmit_packets": base // 3600}
        self.softirq_seconds = 0.0

    def receive_budget(self, dt: float) -> float:
        return max(0.0, self.rate * dt - self._rx_used)

    def receive(self, nbytes: float) -> None:
        self._rx_used += nbytes
        self.c["receive_bytes"] += nbytes
        self.c["receive_packets"] += nbytes / (self.mtu - 52)
        # Receive processing costs CPU in softirq, about a core per ~4 GB/s of TCP.
        self.softirq_seconds += nbytes / 4e9

    def transmit(self, nbytes: float) -> None:
        self._tx_used += nbytes
        self.c["transmit_bytes"] += nbytes
        self.c["transmit_packets"] += max(1.0, nbytes / (self.mtu - 52)) if nbytes > 0 else 0.0

    def transmit_budget(self, dt: float) -> float:
        return max(0.0, self.rate * dt - self._tx_used)

    def end_step(self) -> None:
        self._rx_used = 0.0
        self._tx_used = 0.0

    def counters(self) -> dict:
        c = self.c
        return {
            "receive_bytes": int(c["receive_bytes"]), "receive_packets": int(c["receive_packets"]),
            "receive_errors": 0, "receive_drops": 0, "receive_fifo": 0, "receive_frame": 0,
            "receive_compressed": 0, "receive_multicast": int(c["receive_packets"]) // 5000,
            "transmit_bytes": int(c["transmit_bytes"]), "transmit_packets": int(c["transmit_packets"]),
            "transmit_errors": 0, "transmit_drops": 0, "transmit_fifo": 0, "transmit_collisions": 0,
            "transmit_carrier": 0, "transmit_compressed": 0,
        }


IB_ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                     "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
                     "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
                     "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait", "unicast_xmit_packets",
                     "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets")
ROCE_HW_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored",
                    "out_of_sequence", "packet_seq_err", "implied_nak_seq_err", "duplicate_request",
                    "local_ack_timeout_err", "rnr_nak_retry_err", "out_of_buffer", "req_cqe_error",
                    "resp_cqe_error", "roce_adp_retrans", "roce_slow_restart")
IB_HW_COUNTERS = ("duplicate_request", "out_of_buffer", "out_of_sequence", "packet_seq_err",
                  "local_ack_timeout_err", "rnr_nak_retry_err", "req_cqe_error", "resp_cqe_error", "lifespan")


class RdmaPort:
    def __init__(self, device: str, link_layer: str, rate_bytes: float, pci_address: str, numa_node: int,
                 netdev: str, rng, uptime: float, mtu: int = 4096) -> None:
        self.device = device
        self.port = 1
        self.link_layer = link_layer
        self.rate = rate_bytes
        self.pci_address = pci_address
        self.numa_node = numa_node
        self.netdev = netdev if link_layer == "Ethernet" else ""
        self.mtu = mtu
        base = int(uptime * rng.uniform(1e6, 1e8))
        self.c = {"transmit_bytes": base, "receive_bytes": base, "transmit_packets": base // mtu,
                  "receive_packets": base // mtu}
        self.errors = dict.fromkeys(IB_ERROR_COUNTERS, 0)
        self.errors["unicast_xmit_packets"] = base // mtu
        self.errors["unicast_rcv_packets"] = base // mtu
        self.hw = dict.fromkeys(ROCE_HW_COUNTERS if link_layer == "Ethernet" else IB_HW_COUNTERS, 0)
        if "lifespan" in self.hw:
            self.hw["lifespan"] = 10
        self.guid = "%04x:%04x:%04x:%04x" % tuple(rng.randrange(0x10000) for _ in range(4))

    def carry(self, tx: float, rx: float, dt: float, congestion: float = 0.0) -> None:
        """Move ``tx``/``rx`` bytes this step. ``congestion`` (0..1): the share of the
        traffic's time spent backed up in the fabric (ECN-marked on RoCE, credit-starved on
        InfiniBand)."""
        self.c["transmit_bytes"] += tx
        self.c["receive_bytes"] += rx
        self.c["transmit_packets"] += tx / self.mtu
        self.c["receive_packets"] += rx / self.mtu
        self.errors["unicast_xmit_packets"] += int(tx / self.mtu)
        self.errors["unicast_rcv_packets"] += int(rx / self.mtu)
        if congestion > 0 and (tx > 0 or rx > 0):
            if self.link_layer == "Ethernet":
                marked = int(rx / self.mtu * congestion)
                self.hw["np_ecn_marked_roce_packets"] += marked
                # One CNP per marked flow per 50 us at most (mlx5 default min time between CNPs).
                cnps = min(marked, int(dt / 50e-6) * 8)
                self.hw["np_cnp_sent"] += cnps
                self.hw["rp_cnp_handled"] += cnps
                self.hw["out_of_sequence"] += int(marked * 0.001)
                self.hw["roce_adp_retrans"] += int(marked * 0.0005)
            else:
                # PortXmitWait ticks at the link's symbol-time multiple; about one tick per 64 ns here.
                self.errors["port_xmit_wait"] += int(dt * congestion / 64e-9)

    def traffic(self) -> dict:
        return {"device": self.device, "port": self.port, "link_layer": self.link_layer,
                "transmit_bytes": int(self.c["transmit_bytes"]) // 4 * 4, "receive_bytes": int(self.c["receive_bytes"]) // 4 * 4,
                "transmit_packets": int(self.c["transmit_packets"]), "receive_packets": int(self.c["receive_packets"])}

    def details(self) -> dict:
        ib = self.link_layer == "InfiniBand"
        gbps = self.rate * 8 / 1e9
        return {
            "device": self.device, "pci_address": self.pci_address, "numa_node": self.numa_node,
            "node_guid": self.guid, "firmware_version": "28.39.1002", "hca_type": "MT4129", "board_id": "MT_0000000838",
            "ports": [{
                "port": self.port, "link_layer": self.link_layer, "netdev": self.netdev,
                "state": 4, "state_name": "ACTIVE", "physical_state": 5, "physical_state_name": "LinkUp",
                "rate_bytes_per_second": self.rate,
                "link_width": "4X", "link_speed": ("NDR" if gbps >= 400 else "HDR") if ib else f"{gbps:.0f} Gb/sec",
                "counters": {k: int(v) for k, v in self.errors.items()},
                "hw_counters": {k: int(v) for k, v in self.hw.items()},
            }],
        }
