"""Window statistics of network interfaces at the sample rate: mean, peak and burstiness of
receive and transmit throughput (A9, A10).

Collectives move data in bursts between compute phases; a 15 s scrape rate averages the bursts
into a modest figure, while the per-interval peak and the coefficient of variation show them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from gpuwait.config import Settings
from gpuwait.parsers.netdev import NetDev
from gpuwait.ring import WindowView
from gpuwait.stats.series import burstiness, interval_rates, maximum, window_rate

DIRECTIONS = ("receive", "transmit")


def columns(data: NetDev) -> dict[Hashable, float]:
    cols: dict[Hashable, float] = {}
    for interface, c in data.interfaces.items():
        cols["receive", interface] = c.receive_bytes
        cols["transmit", interface] = c.transmit_bytes
    return cols


@dataclass(frozen=True, slots=True)
class ThroughputWindowStats:
    mean_bytes_per_second: float | None
    max_bytes_per_second: float | None
    burstiness: float | None


@dataclass(frozen=True, slots=True)
class NetdevWindowStats:
    #: interface -> statistics
    receive: dict[str, ThroughputWindowStats]
    transmit: dict[str, ThroughputWindowStats]


def throughput(view: WindowView, direction: str, interface: str) -> ThroughputWindowStats:
    values = view.column((direction, interface))
    rates = interval_rates(view.times, values)
    return ThroughputWindowStats(window_rate(view.times, values), maximum(rates), burstiness(rates))


def summarize(view: WindowView, settings: Settings) -> NetdevWindowStats:
    interfaces = sorted({key[1] for key in view.columns})
    receive, transmit = (
        {interface: throughput(view, direction, interface) for interface in interfaces}
        for direction in DIRECTIONS
    )
    return NetdevWindowStats(receive, transmit)
