"""Network evidence: a NIC or RDMA port whose traffic bursts while the GPU dips (A9, A10, A11).

Collectives move data between compute phases, so a link that carries a GPU's collective
bursts while the GPU waits: its traffic moves against the GPU's activity (strongly negative
correlation at the sampling rate), or, where bursts are irregular in length and rate (a
congested fabric, lognormal goodput) and the correlation is diluted, its bursts fall almost
all inside the GPU's waits, far more than the waits' share of the window would give a link
on its own rhythm. The instants where such a link bursts (near its peak in the window) are
the network evidence.

Where NCCL Inspector's records time the GPU's collectives, a transfer well under the GPU's
share of its NICs' rate on busy ports adds to this evidence (analysis.evidence.collectives).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, and_, eq, ge, lt, or_

from gpuwait.analysis.timeseries import Centred, Grid, correlation, pearson
from gpuwait.collectors.netdev import window as netdev_window
from gpuwait.collectors.rdma import window as rdma_window
from gpuwait.core.config import Option, Settings, parse_fraction, parse_positive
from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.series import quantile


def _correlation(value) -> float:
    f = float(value)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"must be in (0, 1]: {value!r}")
    return f


ANTICORRELATION = Option("verdict.network.anticorrelation", _correlation, 0.3,
                         "How strongly (negative Pearson correlation) a link's rate must move against GPU utilization to count as aligned with its dips.")
BURST_SHARE = Option("verdict.network.burst-share", parse_fraction, 0.5,
                     "Share of a link's peak rate in the window at which an instant counts as a burst.")
MIN_PEAK = Option("verdict.network.min-peak", parse_positive, 10e6,
                  "Bytes per second a link must reach at its peak to be considered at all (idle links have noise, not bursts).")

BURSTS_IN_WAITS = Option("verdict.network.bursts-in-waits", parse_fraction, 0.8,
                         "Share of a link's burst instants that must fall in the GPU's waits for the link to count as aligned with them, when its correlation alone does not show it.")

OPTIONS = (ANTICORRELATION, BURST_SHARE, MIN_PEAK, BURSTS_IN_WAITS)
#: The bursts' share in the waits must exceed the waits' own share of the window by this
#: much: a link bursting at random lands in the waits as often as the waits last.
MIN_LIFT = 0.25
PEAK_QUANTILE = 0.95


@dataclass(frozen=True, slots=True)
class LinkAlignment:
    """How one NIC or RDMA port's traffic lines up with one GPU's utilization."""

    link: str  # "eth0", or "mlx5_0:1" for an RDMA port
    kind: str  # "netdev" or "rdma"
    link_layer: str  # "InfiniBand" or "Ethernet" for RDMA ports, "" for netdevs
    correlation: float | None
    aligned: bool


class Network:
    """Every link's rate on the grid, computed once per pass and shared by all GPUs."""

    def __init__(self, inputs: AnalysisInputs, grid: Grid, settings: Settings, gap: float) -> None:
        self.settings = settings
        self.n = len(grid)
        self.links: list[tuple[LinkAlignment, list[float]]] = []
        self._burst_cache: dict[int, list[_LinkSide]] = {}
        #: Each link's side of its correlations, per start and mask of the pairs valid on both.
        self._sides: dict[tuple[int, int, int | None], Centred] = {}
        netdev = inputs.views.get("netdev")
        if netdev is not None:
            for link in netdev_window.links(netdev):
                self.links.append((LinkAlignment(link.interface, "netdev", "", None, False), grid.rates(link.bytes, gap)))
        rdma = inputs.views.get("rdma_traffic")
        if rdma is not None:
            for port in rdma_window.links(rdma):
                self.links.append((LinkAlignment(f"{port.device}:{port.port}", "rdma", port.link_layer, None, False),
                                   grid.rates(port.bytes, gap)))

    def alignment(self, busy: Sequence[float], waiting: Sequence[float],
                  start: int = 0) -> list[tuple[LinkAlignment, list[bool]]]:
        """Each link's correlation with this GPU's activity, and its burst instants when its
        bursts line up with the GPU's waits (A10). ``waiting`` is the share of each instant
        the GPU waited (no kernel, or a resident collective's footprint).

        Only the instants from ``start`` on are judged (none before it bursts): a link's burst
        level and its correlation are properties of the period judged. A fabric that congests
        carries the same collective at a fraction of its former rate, so its bursts measured
        against the healthy past's peak would not count as bursts until that past has left
        the window; judged over the recent instants alone they do."""
        s = self.settings
        out = []
        before = [False] * start
        busy, waiting = busy[start:], waiting[start:]
        if len(busy) != len(waiting) or len(busy) != self.n - start:
            # Not on the grid: each link judged on its own (pearson and _in_waits truncate).
            for (link, _), side in zip(self.links, self._bursts(start)):
                rate, burst = side.rate, side.burst
                if burst is None:
                    out.append((link, [False] * self.n))
                    continue
                r = pearson(busy, rate)
                aligned = (r is not None and r <= -s[ANTICORRELATION]) or _in_waits(burst, waiting, s[BURSTS_IN_WAITS])
                out.append((LinkAlignment(link.link, link.kind, link.link_layer, r, aligned),
                            before + [aligned and b for b in burst]))
            return out
        # Every GPU is correlated with every link twice a pass: each side is centred once
        # over the pairs where both are valid (the link's own NaN, where the GPU has none),
        # so that a correlation is one dot product, with pearson's arithmetic. The pairs valid
        # on both are one AND of two masks (``_mask``), which also keys the centred sides.
        total = sum(busy)
        busy_valid = None if total == total else _mask(map(eq, busy, busy))
        sides: dict[int | None, Centred] = {}
        waits = _Waits(waiting)
        anticorrelation, in_waits = -s[ANTICORRELATION], s[BURSTS_IN_WAITS]
        judged = len(busy)
        for i, ((link, _), side) in enumerate(zip(self.links, self._bursts(start))):
            rate, burst = side.rate, side.burst
            if burst is None:
                out.append((link, [False] * self.n))
                continue
            if busy_valid is None:
                valid = side.valid
            else:
                valid = busy_valid if side.valid is None else busy_valid & side.valid
            x = sides.get(valid)
            if x is None:
                x = sides[valid] = Centred(busy, total) if valid is None else Centred(list(compress(busy, _flags(valid, judged))))
            y = self._sides.get((start, i, valid))
            if y is None:
                y = self._sides[start, i, valid] = Centred(rate) if valid is None else Centred(list(compress(rate, _flags(valid, judged))))
            r = correlation(x, y)
            aligned = (r is not None and r <= anticorrelation) or waits.hold(side.burst_mask, side.bursts, in_waits)
            out.append((LinkAlignment(link.link, link.kind, link.link_layer, r, aligned),
                        before + burst if aligned else [False] * self.n))
        return out

    def _bursts(self, start: int) -> list[_LinkSide]:
        """Each link's rates from ``start`` on and what is judged of them against every GPU;
        they do not depend on the GPU, so they are worked out once per pass and start."""
        cached = self._burst_cache.get(start)
        if cached is not None:
            return cached
        s = self.settings
        cached = []
        for _, rate in self.links:
            rate = rate[start:]
            total = sum(rate)
            valid = None if total == total else _mask(map(eq, rate, rate))
            # The link's burst rate: a high quantile, not the maximum, so that one pause storm
            # or one lucky interval does not set the bar for every burst.
            peak = quantile(rate, PEAK_QUANTILE) or 0.0
            if peak < s[MIN_PEAK]:
                cached.append(_LinkSide(rate, None, valid))
                continue
            # NaN >= level is False: an instant without a rate is no burst.
            cached.append(_LinkSide(rate, list(map(ge, rate, repeat(s[BURST_SHARE] * peak))), valid))
        self._burst_cache[start] = cached
        return cached

    def quiet(self) -> list[bool]:
        """Per instant, whether no NIC or RDMA port of the host moves more than
        verdict.network.min-peak (no link known: not quiet, nothing can be said)."""
        if not self.links:
            return [False] * self.n
        floor = repeat(self.settings[MIN_PEAK])
        quiet = [True] * self.n
        for _, rate in self.links:
            # NaN < floor is False: an instant without a rate is not quiet.
            quiet = list(map(and_, quiet, map(lt, rate, floor)))
        return quiet

    def moving(self) -> list[float]:
        """Per instant, the bytes per second every NIC and RDMA port of the host moves
        together (NaN where a link's rate is not known; 0 with no link)."""
        out = [0.0] * self.n
        for _, rate in self.links:
            out = list(map(add, out, rate))
        return out

    def port_rates(self, devices: set[str]) -> list[list[float]]:
        """The rates on the grid of the RDMA ports of ``devices`` (NIC names)."""
        return [rate for link, rate in self.links if link.kind == "rdma" and link.link.split(":")[0] in devices]

    def evidence(self, links: list[tuple[LinkAlignment, list[bool]]]) -> list[bool]:
        evidence = [False] * self.n
        for link, bursts in links:
            if link.aligned:
                evidence = list(map(or_, evidence, bursts))
        return evidence


def _in_waits(burst: Sequence[bool], waiting: Sequence[float], share: float) -> bool:
    """Whether the link's bursts fall in the GPU's waits far more than chance would put them."""
    known = [(b, w) for b, w in zip(burst, waiting) if w == w]
    if not known:
        return False
    in_bursts = [w >= 0.5 for b, w in known if b]
    if len(in_bursts) < 3:
        return False
    inside = sum(in_bursts) / len(in_bursts)
    base = sum(1 for _, w in known if w >= 0.5) / len(known)
    return inside >= share and inside - base >= MIN_LIFT


def _mask(flags: Iterable[bool]) -> int:
    """Flags as an integer of one byte per flag, 0 or 1, the first flag in the lowest byte:
    the AND of two masks is their flags' AND, and its bit count how many are set in both,
    each one operation at C speed where a list of flags costs one step per flag."""
    return int.from_bytes(bytes(flags), "little")


def _flags(mask: int, n: int) -> bytes:
    """The ``n`` flags of ``mask``, as selectors for ``compress``."""
    return mask.to_bytes(n, "little")


class _LinkSide:
    """A link's rates over the judged instants, its burst instants among them (None: it never
    reaches verdict.network.min-peak), as a ``_mask`` too, and how many, and which rates are
    valid (a ``_mask``; None: all)."""

    __slots__ = ("rate", "burst", "burst_mask", "bursts", "valid")

    def __init__(self, rate: list[float], burst: list[bool] | None, valid: int | None) -> None:
        self.rate, self.burst, self.valid = rate, burst, valid
        self.burst_mask = _mask(burst) if burst is not None else 0
        self.bursts = self.burst_mask.bit_count()


class _Waits:
    """A GPU's waits as ``_in_waits`` judges every link's bursts against them: which instants
    are known and which are waits (``_mask``s), counted once per GPU, so that a link costs a
    bit count or two. The bursts must be as many as ``waiting``'s instants."""

    __slots__ = ("known", "waits", "base", "all_known")

    def __init__(self, waiting: Sequence[float]) -> None:
        self.known = _mask(map(eq, waiting, waiting))
        # NaN >= 0.5 is False: an unknown instant is never a wait.
        self.waits = _mask(map(ge, waiting, repeat(0.5)))
        known = self.known.bit_count()
        self.all_known = known == len(waiting)
        self.base = self.waits.bit_count() / known if known else None

    def hold(self, burst: int, bursts: int, share: float) -> bool:
        """Whether the bursts of ``burst`` (a ``_mask``, ``bursts`` of them) fall in the waits
        as _in_waits has it."""
        if self.base is None:
            return False
        if not self.all_known:
            bursts = (self.known & burst).bit_count()
        if bursts < 3:
            return False
        inside = (self.waits & burst).bit_count() / bursts
        return inside >= share and inside - self.base >= MIN_LIFT
