"""What every signal source shares: where the host's files are, and how a read fails."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

from gpuwait.errors import SourceError
from gpuwait.reading import Reading


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
    def from_settings(cls, settings) -> "HostPaths":
        return cls(settings["path.procfs"], settings["path.sysfs"])


def read_text(path: str) -> str:
    """Read a pseudo-file whole, mapping every OS failure to a SourceError with a stable cause."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError as e:
        raise SourceError(f"missing:{path}", str(e)) from None
    except PermissionError as e:
        raise SourceError(f"permission:{path}", str(e)) from None
    except OSError as e:
        raise SourceError(f"unreadable:{path}", str(e)) from None


class Source(ABC):
    """A signal source: knows its files, reads them, returns one Reading.

    ``read`` raises SourceError when nothing could be read; when only parts failed it
    returns a Reading whose ``errors`` name them.
    """

    name: str = ""
    #: "fast" sources are read every --sample.interval, "slow" ones every --sample.slow-interval.
    tier: str = "fast"

    def __init__(self, paths: HostPaths) -> None:
        self.paths = paths

    @abstractmethod
    def read(self) -> Reading: ...

    def close(self) -> None:
        """Release handles; called once at shutdown."""

    def reading(self, t: float, data, errors: tuple[str, ...] = ()) -> Reading:
        """Wrap a payload; ``t`` is time.monotonic() taken just before the files were read."""
        return Reading(self.name, t, data, tuple(errors))
