"""What the netdev source's Reading holds: the counters of /proc/net/dev per interface."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InterfaceCounters:
    receive_bytes: int
    receive_packets: int
    receive_errors: int
    receive_drops: int
    receive_fifo: int
    receive_frame: int
    receive_compressed: int
    receive_multicast: int
    transmit_bytes: int
    transmit_packets: int
    transmit_errors: int
    transmit_drops: int
    transmit_fifo: int
    transmit_collisions: int
    transmit_carrier: int
    transmit_compressed: int


@dataclass(frozen=True, slots=True)
class NetDev:
    #: interface -> counters; a live reading holds a core.fields.DeviceTable
    interfaces: Mapping[str, InterfaceCounters]
    #: Interface names (or "line N" where there was no name) of lines that did not parse.
    malformed: tuple[str, ...] = ()
