"""Window statistics of network interfaces at the sample rate: mean, peak and burstiness of
receive and transmit throughput (A9, A10).

Collectives move data in bursts between compute phases; a 15 s scrape rate averages the bursts
into a modest figure, while the per-interval peak and the coefficient of variation show them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gpuwait.collectors.netdev.payload import NetDev
from gpuwait.core.config import Settings
from gpuwait.core.fields import interleaved
from gpuwait.core.ring import Column, ColumnRow, RowKeys, WindowView
from gpuwait.core.series import added

#: Column keys are (direction, interface): bytes since the interface came up.
DIRECTIONS = ("receive", "transmit")
_RECEIVE, _TRANSMIT = DIRECTIONS


_ROW_KEYS = RowKeys((_RECEIVE, _TRANSMIT))
_FIELDS = ("receive_bytes", "transmit_bytes")


def columns(data: NetDev) -> ColumnRow:
    interfaces = data.interfaces
    return ColumnRow(_ROW_KEYS(tuple(interfaces)), interleaved(interfaces, _FIELDS))


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
    key = (direction, interface)
    return ThroughputWindowStats(view.rate(key), *view.rate_shape(key))


def summarize(view: WindowView, settings: Settings) -> NetdevWindowStats:
    interfaces = sorted({key[1] for key in view.columns})
    receive, transmit = (
        {interface: throughput(view, direction, interface) for interface in interfaces}
        for direction in DIRECTIONS
    )
    return NetdevWindowStats(receive, transmit)


# -- what the verdict reads ------------------------------------------------------------------


class Link(NamedTuple):
    interface: str
    #: Bytes received and transmitted, summed: a collective's traffic goes both ways.
    bytes: Column


def links(view: WindowView) -> list[Link]:
    """Every interface of the window, by name."""
    names = sorted({k[1] for k in view.columns if isinstance(k, tuple) and k[0] == _RECEIVE})
    return [Link(name, Column(view.times, added(view.column((_RECEIVE, name)), view.column((_TRANSMIT, name)))))
            for name in names]
