"""Sources of pseudo-files with one line per device (/proc/diskstats, /proc/net/dev): the whole
file is read and parsed each time, devices named by an exclude pattern are skipped, and a line
that does not parse costs only its device."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gpuwait.core.errors import ParseError, SourceError
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, KernelFileSource


class ExcludeFilter:
    """``filter(name)`` is True for names the pattern does not find (Go ``MatchString``
    semantics, as node_exporter's own device-exclude flags).

    Decisions are cached: the regex runs once per name rather than once per line per sample.
    """

    #: Names can churn without bound (loop devices and veths of short-lived containers).
    MAX_CACHED = 4096

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self._kept: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        kept = self._kept.get(name)
        if kept is None:
            if len(self._kept) >= self.MAX_CACHED:
                self._kept.clear()
            kept = self._kept[name] = self.pattern.search(name) is None
        return kept


class DeviceLinesSource(KernelFileSource):
    """Subclasses name the file (``path_parts`` under procfs) and its parser: ``parse(text,
    keep)`` returns the Reading's payload, whose ``malformed`` names the lines it dropped, or
    raises ParseError when the text is not the format at all."""

    path_parts: tuple[str, ...] = ()
    parse: Callable[[str, Callable[[str], bool]], Any]

    def __init__(self, paths: HostPaths, device_exclude: re.Pattern[str]) -> None:
        super().__init__(paths, paths.proc(*self.path_parts))
        self.keep = ExcludeFilter(device_exclude)

    def parse_reading(self, t: float, text: str) -> Reading:
        try:
            parsed = self.parse(text, self.keep)
        except ParseError as e:
            raise SourceError(f"parse:{self.path}", str(e)) from None
        return self.reading(t, parsed, tuple(f"parse:{self.path}:{name}" for name in parsed.malformed))
