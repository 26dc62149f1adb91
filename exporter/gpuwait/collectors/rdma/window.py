"""Window statistics of RDMA port traffic: mean and peak rate per sampling interval and how
bursty it is, per port and direction (A9, A10).

Collective communication shows as short bursts between compute phases, so the mean alone
hides it: the peak interval rate and the burstiness (coefficient of variation of the interval
rates) say whether the link is busy in bursts while the GPUs wait.

HCAs without the 64-bit PortCountersExtended report data and packets in 32 bits. Per the IBTA
those counters stop at all ones; some drivers let them wrap instead. Both are handled: a run
of samples whose values all fit 32 bits is read with the 32-bit modulus, and a sample stuck at
the maximum breaks the run, because how much was counted while it was stuck is unknowable
(no rate is published rather than a made-up one). A gap (port unreadable or unplugged) also
breaks the run: the counter may have been reset in between.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpuwait.collectors.rdma.parse import DATA_WORD_BYTES
from gpuwait.collectors.rdma.payload import RdmaData, RdmaPortData, RdmaTrafficData
from gpuwait.core.config import Settings
from gpuwait.core.ring import Column, WindowView
from gpuwait.core.series import added, burstiness, interval_rates, maximum, total_increase

#: Largest value of the legacy 32-bit PortCounters data and packet fields.
LEGACY_COUNTER_MAX = (1 << 32) - 1

# Column keys are (kind, device, port, link_layer).
_TX, _RX, _TXP, _RXP = "tx", "rx", "txp", "rxp"
#: Column kind -> counter units per count (data counters count 4-octet words).
_KINDS = {_TX: DATA_WORD_BYTES, _RX: DATA_WORD_BYTES, _TXP: 1, _RXP: 1}

PortKey = tuple[str, int, str]  # (device, port, link_layer)


def packets(port: RdmaPortData) -> tuple[int | None, int | None]:
    """The port's (transmitted, received) packet counters, as the slow tier reads them."""
    return port.counters.get("port_xmit_packets"), port.counters.get("port_rcv_packets")


def packet_columns(data: RdmaData) -> dict[Hashable, float]:
    """The packet counters the slow tier reads, keyed as ``columns`` keys a trace's: their
    window's ``summarize`` gives the packet means alone."""
    cols: dict[Hashable, float] = {}
    for device in data.devices:
        for p in device.ports:
            for kind, value in zip((_TXP, _RXP), packets(p)):
                if value is not None:
                    cols[(kind, device.device, p.port, p.link_layer)] = float(value)
    return cols


def columns(data: RdmaTrafficData) -> dict[Hashable, float]:
    cols: dict[Hashable, float] = {}
    for p in data.ports:
        if p.transmit_bytes is not None:
            cols[(_TX, p.device, p.port, p.link_layer)] = float(p.transmit_bytes)
        if p.receive_bytes is not None:
            cols[(_RX, p.device, p.port, p.link_layer)] = float(p.receive_bytes)
        if p.transmit_packets is not None:
            cols[(_TXP, p.device, p.port, p.link_layer)] = float(p.transmit_packets)
        if p.receive_packets is not None:
            cols[(_RXP, p.device, p.port, p.link_layer)] = float(p.receive_packets)
    return cols


def saturated_value(unit: int) -> float:
    return float(LEGACY_COUNTER_MAX * unit)


def runs(times: Sequence[float], values: Sequence[float], stuck: float) -> Iterator[tuple[list[float], list[float]]]:
    """Maximal runs of consecutive samples that are present and not stuck at ``stuck``."""
    run_t: list[float] = []
    run_v: list[float] = []
    for t, v in zip(times, values):
        if v != v or v == stuck:
            if len(run_t) >= 2:
                yield run_t, run_v
            run_t, run_v = [], []
        else:
            run_t.append(t)
            run_v.append(v)
    if len(run_t) >= 2:
        yield run_t, run_v


def counter_rates(times: Sequence[float], values: Sequence[float], unit: int) -> tuple[list[float], float | None]:
    """(per-interval rates, mean rate over the covered time) of one traffic counter column."""
    stuck = saturated_value(unit)
    legacy_modulus = float((LEGACY_COUNTER_MAX + 1) * unit)
    rates: list[float] = []
    increase = span = 0.0
    for run_t, run_v in runs(times, values, stuck):
        # A 64-bit counter is beyond 32 bits soon after boot; one that never was may wrap there.
        modulus = legacy_modulus if max(run_v) < stuck else None
        rates.extend(interval_rates(run_t, run_v, modulus))
        covered = total_increase(run_t, run_v, modulus)
        if covered is not None:
            increase += covered[0]
            span += covered[1]
    return rates, (increase / span if span > 0 else None)


@dataclass(frozen=True, slots=True)
class PortWindowStats:
    transmit_bytes_mean: float | None
    transmit_bytes_max: float | None
    transmit_burstiness: float | None
    receive_bytes_mean: float | None
    receive_bytes_max: float | None
    receive_burstiness: float | None
    transmit_packets_mean: float | None
    receive_packets_mean: float | None


@dataclass(frozen=True, slots=True)
class RdmaWindowStats:
    ports: dict[PortKey, PortWindowStats]


def _direction(view: WindowView, kind: str, port: PortKey,
               shape: bool = True) -> tuple[float | None, float | None, float | None]:
    """(mean rate, peak interval rate, burstiness) of one counter; the last two only with ``shape``."""
    key = (kind, *port)
    if key not in view.columns:
        return None, None, None
    unit = _KINDS[kind]
    if view.steady(key) and not _reached(view, key, saturated_value(unit)):
        # One run of every row, none missing, stuck, reset or wrapped: what counter_rates
        # would find, from the ring's own account of the column.
        mean_rate = view.rate(key)
        if not shape:
            return mean_rate, None, None
        return (mean_rate, *view.rate_shape(key))
    rates, mean_rate = counter_rates(view.times, view.columns[key], unit)
    return mean_rate, maximum(rates), burstiness(rates)


def _reached(view: WindowView, key: tuple, ceiling: float) -> bool:
    """Whether a steady column holds ``ceiling``: a counter that never goes back holds it
    only between its ends, so only one that starts at or below it and ends at or above it
    needs its rows looked at (a 64-bit counter is past it from its first row)."""
    ends = view.steady_ends(key)
    if ends is not None:
        first, last = ends
        if last < ceiling or first > ceiling:
            return False
        if last == ceiling:
            return True
    return ceiling in view.values(key)


def summarize(view: WindowView, settings: Settings) -> RdmaWindowStats:
    ports = sorted({key[1:] for key in view.columns if isinstance(key, tuple) and key[0] in _KINDS})
    stats: dict[PortKey, PortWindowStats] = {}
    for port in ports:
        tx_mean, tx_max, tx_burst = _direction(view, _TX, port)
        rx_mean, rx_max, rx_burst = _direction(view, _RX, port)
        stats[port] = PortWindowStats(
            transmit_bytes_mean=tx_mean,
            transmit_bytes_max=tx_max,
            transmit_burstiness=tx_burst,
            receive_bytes_mean=rx_mean,
            receive_bytes_max=rx_max,
            receive_burstiness=rx_burst,
            transmit_packets_mean=_direction(view, _TXP, port, shape=False)[0],
            receive_packets_mean=_direction(view, _RXP, port, shape=False)[0],
        )
    return RdmaWindowStats(stats)


# -- what the verdict reads ------------------------------------------------------------------


class Link(NamedTuple):
    device: str
    port: int
    link_layer: str
    #: Bytes transmitted and received, summed: a collective's traffic goes both ways.
    bytes: Column


def links(view: WindowView) -> list[Link]:
    """Every port of the window with data counters, by (device, port, link layer)."""
    ports = sorted({k[1:] for k in view.columns if isinstance(k, tuple) and k[0] == _RX})
    return [Link(device, port, layer, Column(view.times, added(view.column((_RX, device, port, layer)),
                                                                view.column((_TX, device, port, layer)))))
            for device, port, layer in ports]
