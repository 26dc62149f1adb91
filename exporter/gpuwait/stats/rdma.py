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

from gpuwait.config import Settings
from gpuwait.ring import WindowView
from gpuwait.sources.rdma import DATA_WORD_BYTES, RdmaTrafficData
from gpuwait.stats.series import burstiness, interval_rates, maximum, total_increase

#: Largest value of the legacy 32-bit PortCounters data and packet fields.
LEGACY_COUNTER_MAX = (1 << 32) - 1

#: Column kind -> counter units per count (data counters count 4-octet words).
_KINDS = {"tx": DATA_WORD_BYTES, "rx": DATA_WORD_BYTES, "txp": 1, "rxp": 1}

PortKey = tuple[str, int, str]  # (device, port, link_layer)


def columns(data: RdmaTrafficData) -> dict[Hashable, float]:
    cols: dict[Hashable, float] = {}
    for p in data.ports:
        if p.transmit_bytes is not None:
            cols[("tx", p.device, p.port, p.link_layer)] = float(p.transmit_bytes)
        if p.receive_bytes is not None:
            cols[("rx", p.device, p.port, p.link_layer)] = float(p.receive_bytes)
        if p.transmit_packets is not None:
            cols[("txp", p.device, p.port, p.link_layer)] = float(p.transmit_packets)
        if p.receive_packets is not None:
            cols[("rxp", p.device, p.port, p.link_layer)] = float(p.receive_packets)
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


def _direction(view: WindowView, kind: str, port: PortKey) -> tuple[float | None, float | None, float | None]:
    key = (kind, *port)
    if key not in view.columns:
        return None, None, None
    rates, mean_rate = counter_rates(view.times, view.columns[key], _KINDS[kind])
    return mean_rate, maximum(rates), burstiness(rates)


def summarize(view: WindowView, settings: Settings) -> RdmaWindowStats:
    ports = sorted({key[1:] for key in view.columns if isinstance(key, tuple) and key[0] in _KINDS})
    stats: dict[PortKey, PortWindowStats] = {}
    for port in ports:
        tx_mean, tx_max, tx_burst = _direction(view, "tx", port)
        rx_mean, rx_max, rx_burst = _direction(view, "rx", port)
        stats[port] = PortWindowStats(
            transmit_bytes_mean=tx_mean,
            transmit_bytes_max=tx_max,
            transmit_burstiness=tx_burst,
            receive_bytes_mean=rx_mean,
            receive_bytes_max=rx_max,
            receive_burstiness=rx_burst,
            transmit_packets_mean=_direction(view, "txp", port)[0],
            receive_packets_mean=_direction(view, "rxp", port)[0],
        )
    return RdmaWindowStats(stats)
