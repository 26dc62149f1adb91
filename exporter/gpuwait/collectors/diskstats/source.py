"""Block device IO counters from /proc/diskstats (A6, A7)."""

from __future__ import annotations

from gpuwait.collectors.diskstats.parse import parse_diskstats
from gpuwait.core.config import Option, parse_regex
from gpuwait.core.device_lines import DeviceLinesSource

#: node_exporter's default: partitions double-count their disk, and RAM disks, loop and floppy
#: devices say nothing about the storage a data loader reads from.
DEFAULT_DEVICE_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"

DEVICE_EXCLUDE = Option(
    "collector.diskstats.device-exclude", parse_regex, parse_regex(DEFAULT_DEVICE_EXCLUDE),
    "Regular expression of block device names the diskstats collector leaves out.", "REGEX",
)


class DiskstatsSource(DeviceLinesSource):
    """Its Reading's data is a ``payload.Diskstats``."""

    name = "diskstats"
    tier = "fast"
    path_parts = ("diskstats",)
    parse = staticmethod(parse_diskstats)
