"""What every signal source shares: where the host's files are, and how a read fails."""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from gpuwait.core.config import PATH_PROCFS, PATH_SYSFS, Settings
from gpuwait.core.pseudofile import KeptDescriptors
from gpuwait.core.reading import Reading


def user_hz() -> int:
    """USER_HZ, the unit of the times in /proc/stat and /proc/<pid>/stat."""
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


@dataclass(frozen=True)
class HostPaths:
    """Roots of the host's pseudo-filesystems; a container mounts the host's at /host/proc."""

    procfs: str = "/proc"
    sysfs: str = "/sys"

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    @classmethod
    def from_settings(cls, settings: Settings) -> "HostPaths":
        return cls(settings[PATH_PROCFS], settings[PATH_SYSFS])


class Source(ABC):
    """A signal source: knows its files, reads them, returns one Reading.

    ``read`` raises SourceError when nothing could be read, and NoData when the kernel has
    nothing for it to report (the feature is absent); when only parts failed it returns a
    Reading whose ``errors`` name them.
    """

    name: str = ""
    #: "fast" sources are read every --sample.interval, "slow" ones every --sample.slow-interval.
    tier: str = "fast"

    def __init__(self, paths: HostPaths) -> None:
        self.paths = paths

    @abstractmethod
    def read(self) -> Reading: ...

    def capture(self) -> Any:
        """What a read takes from the kernel, never None, for ``decode`` to make the Reading
        of; raises as ``read`` does. A source whose parsing costs more than its system calls
        leaves the parsing to ``decode``: the sampler captures at every sample and decodes a
        second's captures together. By default, the whole Reading."""
        return self.read()

    def decode(self, captured: Any) -> Reading:
        """The Reading of what ``capture`` took (``read`` is ``decode(capture())``); raises
        as ``read`` does."""
        return captured

    def close(self) -> None:
        """Release handles; called once at shutdown."""

    def reading(self, t: float, data, errors: tuple[str, ...] = ()) -> Reading:
        """Wrap a payload; ``t`` is time.monotonic() taken just before the files were read."""
        return Reading(self.name, t, data, tuple(errors))


class KernelFileSource(Source):
    """A source whose reading is one kernel file, read through a kept descriptor: the capture
    is the file's text and the time it was read at, and ``parse_reading(t, text)`` makes the
    Reading (raising SourceError for a file it cannot read at all)."""

    def __init__(self, paths: HostPaths, path: str) -> None:
        super().__init__(paths)
        self.path = path
        self._kept = KeptDescriptors()

    def close(self) -> None:
        self._kept.close()

    def read(self) -> Reading:
        return self.decode(self.capture())

    def capture(self) -> tuple[float, str]:
        t = time.monotonic()
        return t, self._kept.read_text(self.path)

    def decode(self, captured: tuple[float, str]) -> Reading:
        return self.parse_reading(*captured)

    @abstractmethod
    def parse_reading(self, t: float, text: str) -> Reading: ...
