"""Sync evidence: a peer GPU of the same owner still computing while this one is idle (A12).
The GPUs of one job meet at each collective; the one that arrives first waits for the last."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuwait.core.config import Option, Settings, parse_fraction

PEER_BUSY = Option("verdict.sync.peer-busy", parse_fraction, 0.5,
                   "Utilization at which a peer GPU of the same owner counts as still computing.")

OPTIONS = (PEER_BUSY,)


def sync(gpu: tuple[str, str], owner: str, busy: Mapping[tuple[str, str], Sequence[float]],
         owner_of: Mapping[tuple[str, str], str], settings: Settings, n: int) -> list[bool]:
    """``busy`` is every GPU's activity on the grid, ``owner_of`` every GPU's owner."""
    if not owner:
        return [False] * n
    peers = [p for p in busy if p != gpu and owner_of.get(p) == owner]
    if not peers:
        return [False] * n
    level = settings[PEER_BUSY]
    return [any(busy[p][i] >= level for p in peers) for i in range(n)]
