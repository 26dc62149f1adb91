"""Block device IO counters from /proc/diskstats (A6, A7)."""

from __future__ import annotations

from gpuwait.config import Option, parse_regex, register_option
from gpuwait.parsers.diskstats import parse_diskstats
from gpuwait.sources.device_lines import DeviceLinesSource

#: node_exporter's default: partitions double-count their disk, and RAM disks, loop and floppy
#: devices say nothing about the storage a data loader reads from.
DEFAULT_DEVICE_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"

register_option(Option(
    "collector.diskstats.device-exclude", parse_regex, parse_regex(DEFAULT_DEVICE_EXCLUDE),
    "Regular expression of block device names the diskstats collector leaves out.", "REGEX",
))


class DiskstatsSource(DeviceLinesSource):
    """Its Reading's data is a ``parsers.diskstats.Diskstats``."""

    name = "diskstats"
    tier = "fast"
    path_parts = ("diskstats",)
    parse = staticmethod(parse_diskstats)
