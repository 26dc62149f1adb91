"""What the two rdma sources' Readings hold: traffic counters per port (fast tier), and each
device's identity, port state and error counters (slow tier)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PortTraffic:
    device: str
    port: int
    link_layer: str
    #: Cumulative, None when the driver reports the counter as not available.
    transmit_bytes: int | None
    receive_bytes: int | None
    #: Read by the slow tier (RdmaPortData.counters), None here: the window needs the bytes at
    #: the sampling rate, the packets only as their mean. A trace may carry them here.
    transmit_packets: int | None = None
    receive_packets: int | None = None


@dataclass(frozen=True, slots=True)
class RdmaTrafficData:
    ports: tuple[PortTraffic, ...]


@dataclass(frozen=True, slots=True)
class RdmaPortData:
    port: int
    link_layer: str
    #: The Ethernet (RoCE) or IPoIB interface of the port, "" when there is none.
    netdev: str
    state: int | None
    state_name: str
    physical_state: int | None
    physical_state_name: str
    rate_bytes_per_second: float | None
    #: "4X"; "" when the rate could not be read.
    link_width: str
    #: "NDR"; "" when unknown (or SDR on old kernels).
    link_speed: str
    #: counters/<name> except the data counters (the fast tier has those).
    counters: dict[str, int]
    #: hw_counters/<name>: driver-specific (mlx5: congestion, retransmits, ...).
    hw_counters: dict[str, int]


@dataclass(frozen=True, slots=True)
class RdmaDeviceData:
    device: str
    #: "" for a device without a PCI function (rxe, siw on a virtual interface).
    pci_address: str
    numa_node: int
    node_guid: str
    firmware_version: str
    hca_type: str
    board_id: str
    ports: tuple[RdmaPortData, ...]


@dataclass(frozen=True, slots=True)
class RdmaData:
    devices: tuple[RdmaDeviceData, ...]
