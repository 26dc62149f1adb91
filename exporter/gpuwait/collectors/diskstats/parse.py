"""/proc/diskstats: per block device IO counters (Documentation/admin-guide/iostats.rst).

Each line is ``major minor name`` and then 11 fields (up to 4.17), 15 (4.18 added discards) or
17 (5.5 added flushes). Sizes are in 512-byte sectors whatever the device's own sector size,
times in milliseconds. The kernel prints every time field as a 32-bit unsigned int
(``jiffies_to_msecs`` / ``(unsigned int)div_u64(nsecs, NSEC_PER_MSEC)``), so they wrap at
2**32 ms, about 49.7 days of accumulated time: the weighted queue time of a busy NVMe device
gets there within days. Values here are converted to bytes and seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from operator import mul, truediv

from gpuwait.collectors.diskstats.payload import COUNTER_FIELDS, DiskCounters, Diskstats
from gpuwait.core.errors import ParseError
from gpuwait.core.fields import DeviceTable, counter_columns, parse_devices, u64s

SECTOR_BYTES = 512
#: Width of the millisecond fields, in seconds: the modulus to unwrap them with.
TIME_FIELD_MODULUS_SECONDS = (1 << 32) / 1000.0
#: Field counts after ``major minor name`` of the layouts kernels print.
BASE_FIELDS, DISCARD_FIELDS, FLUSH_FIELDS = 11, 15, 17


def parse_diskstats_line(parts: list[str]) -> DiskCounters:
    """One line, already split on whitespace."""
    n = len(parts) - 3
    if n < BASE_FIELDS or (n < FLUSH_FIELDS and n not in (BASE_FIELDS, DISCARD_FIELDS)):
        raise ParseError(f"{len(parts)} columns; expected 14, 18 or 20")
    # Later kernels may append fields: the known ones keep their positions.
    major, minor, *v = u64s([parts[0], parts[1], *parts[3 : 3 + min(n, FLUSH_FIELDS)]])
    has_discards = n >= DISCARD_FIELDS
    has_flushes = n >= FLUSH_FIELDS
    return DiskCounters(
        major, minor,
        reads_completed=v[0], reads_merged=v[1], read_bytes=v[2] * SECTOR_BYTES, read_time_seconds=v[3] / 1000,
        writes_completed=v[4], writes_merged=v[5], write_bytes=v[6] * SECTOR_BYTES, write_time_seconds=v[7] / 1000,
        io_now=v[8], io_time_seconds=v[9] / 1000, io_time_weighted_seconds=v[10] / 1000,
        discards_completed=v[11] if has_discards else None,
        discards_merged=v[12] if has_discards else None,
        discard_bytes=v[13] * SECTOR_BYTES if has_discards else None,
        discard_time_seconds=v[14] / 1000 if has_discards else None,
        flushes_completed=v[15] if has_flushes else None,
        flush_time_seconds=v[16] / 1000 if has_flushes else None,
    )


def parse_diskstats(text: str, keep: Callable[[str], bool] | None = None) -> Diskstats:
    """Every device line whose name ``keep`` accepts (all without ``keep``).

    A line that does not parse is listed in ``malformed`` and costs only that device; the
    whole text is rejected (ParseError) only when it has malformed lines and no good one.
    """
    table = device_table(text, keep)
    if table is not None:
        return Diskstats(table)
    devices, malformed = parse_devices(_named_lines(text), parse_diskstats_line, keep, "device")
    return Diskstats(devices, malformed)


#: Columns of a line in the layouts kernels print (``major minor name`` and the fields)
_WIDTHS = frozenset(3 + fields for fields in (BASE_FIELDS, DISCARD_FIELDS, FLUSH_FIELDS))
#: Per column after the name (major, minor, the fields): sectors to bytes, milliseconds to
#: seconds, or the count as printed
_CONVERSIONS = tuple((mul, SECTOR_BYTES) if name.endswith("_bytes") else (truediv, 1000) if name.endswith("_seconds")
                     else None for name in COUNTER_FIELDS)


def device_table(text: str, keep: Callable[[str], bool] | None = None) -> DeviceTable[DiskCounters] | None:
    """``parse_diskstats`` of a file in the shape every kernel prints, in one pass over the
    whole file; None for any other, which ``parse_diskstats`` then reads line by line.

    The 10 Hz read of a node's /proc/diskstats is a line per disk, each with the same number
    of columns: one split lays the values out with a fixed stride, so each field is a slice,
    converted in C, where a line at a time costs a check, a list and a DiskCounters per disk.
    What it takes as the usual shape: ASCII, every line one of the kernels' layouts and all of
    the same width, every column but the name an unsigned 64-bit decimal, every name listed
    once; anything else, and the careful parser decides."""
    if not text.isascii():
        return None
    rows = list(map(str.split, text.splitlines()))
    if not rows:
        return None
    width = len(rows[0])
    if width not in _WIDTHS or any(len(row) != width for row in rows):
        return None
    tokens = list(chain.from_iterable(rows))
    names = tokens[2::width]
    if len(set(names)) != len(names):
        return None
    del tokens[2::width]  # what is left: width - 1 numbers a line
    counted = counter_columns(names, tokens, width - 1, keep, _CONVERSIONS)
    if counted is None:
        return None
    return DeviceTable(*counted, DiskCounters)


def _named_lines(text: str):
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if len(parts) >= 3:
            yield parts[2], parts
        elif parts:
            yield f"line {lineno}", None
