"""Network evidence: a NIC or RDMA port whose traffic bursts while the GPU dips (A9, A10, A11).

Collectives move data between compute phases, so a link that carries a GPU's collective
moves against its activity: strongly negative correlation at the sampling rate. The
instants where such a link bursts (near its peak in the window) are the network evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuwait.analysis.timeseries import Grid, pearson
from gpuwait.collectors.netdev import window as netdev_window
from gpuwait.collectors.rdma import window as rdma_window
from gpuwait.core.config import Option, Settings, parse_fraction, parse_positive
from gpuwait.core.plugin import AnalysisInputs


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

OPTIONS = (ANTICORRELATION, BURST_SHARE, MIN_PEAK)


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
        netdev = inputs.views.get("netdev")
        if netdev is not None:
            for link in netdev_window.links(netdev):
                self.links.append((LinkAlignment(link.interface, "netdev", "", None, False), grid.rates(link.bytes, gap)))
        rdma = inputs.views.get("rdma_traffic")
        if rdma is not None:
            for port in rdma_window.links(rdma):
                self.links.append((LinkAlignment(f"{port.device}:{port.port}", "rdma", port.link_layer, None, False),
                                   grid.rates(port.bytes, gap)))

    def alignment(self, busy: Sequence[float]) -> list[tuple[LinkAlignment, list[bool]]]:
        """Each link's correlation with this GPU's activity, and its burst instants when the
        two move against each other (dips aligned with bursts, A10)."""
        s = self.settings
        out = []
        for link, rate in self.links:
            peak = max((r for r in rate if r == r), default=0.0)
            if peak < s[MIN_PEAK]:
                out.append((link, [False] * self.n))
                continue
            r = pearson(busy, rate)
            aligned = r is not None and r <= -s[ANTICORRELATION]
            level = s[BURST_SHARE] * peak
            bursts = [aligned and v == v and v >= level for v in rate]
            out.append((LinkAlignment(link.link, link.kind, link.link_layer, r, aligned), bursts))
        return out

    def evidence(self, links: list[tuple[LinkAlignment, list[bool]]]) -> list[bool]:
        evidence = [False] * self.n
        for link, bursts in links:
            if link.aligned:
                evidence = [a or b for a, b in zip(evidence, bursts)]
        return evidence
