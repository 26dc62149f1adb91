"""The owners that hold a GPU process right now, shared between the sources of one host.

The GPU collector reads every GPU process's cgroup to attribute it (``tracker``); a source that
reads per-owner files (the owner cgroups) takes the owners from here instead of scanning /proc
a second time, and no collector has to import another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuwait.core.source import HostPaths
from gpuwait.owners.cgroup import Owner

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    owner: Owner
    #: monotonic time of the latest attribution that named the owner
    seen_at: float
    #: the most recent attribution named it (else only an earlier one did)
    latest: bool


class OwnerDirectory:
    """The owners that hold a GPU process, as the GPU collector last attributed its processes.

    Written by one source's thread, read by others'. Owners not named for ``forget_after``
    seconds are dropped, so the directory stays bounded however many jobs come and go.
    """

    def __init__(self, *, forget_after: float = 600.0, clock: Clock = time.monotonic) -> None:
        self.forget_after = forget_after
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[Owner, float]] = {}
        self._updated_at: float | None = None

    def update(self, owners: Iterable[Owner]) -> None:
        """Record one attribution: ``owners`` hold a GPU process now (none: no GPU process)."""
        now = self.clock()
        with self._lock:
            for owner in owners:
                self._seen[owner.id] = (owner, now)
            self._updated_at = now
            for owner_id in [o for o, (_, seen) in self._seen.items() if now - seen > self.forget_after]:
                del self._seen[owner_id]

    def current(self, max_age: float) -> dict[str, DirectoryEntry]:
        """Owners named within the last ``max_age`` seconds, by id."""
        now = self.clock()
        with self._lock:
            return {
                owner_id: DirectoryEntry(owner, seen, seen == self._updated_at)
                for owner_id, (owner, seen) in sorted(self._seen.items())
                if now - seen <= max_age
            }


_directories: dict[HostPaths, list] = {}
_directories_lock = threading.Lock()


def acquire_directory(paths: HostPaths) -> OwnerDirectory:
    """The directory of the host at ``paths``, shared by every source of that host in this
    process; each ``acquire_directory`` is paired with a ``release_directory``."""
    with _directories_lock:
        held = _directories.setdefault(paths, [OwnerDirectory(), 0])
        held[1] += 1
        return held[0]


def release_directory(paths: HostPaths) -> None:
    with _directories_lock:
        held = _directories.get(paths)
        if held is None:
            return
        held[1] -= 1
        if held[1] <= 0:
            del _directories[paths]
