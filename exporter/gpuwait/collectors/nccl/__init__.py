"""The nccl collector: NCCL's own timing of each rank's collectives, from the files NCCL
Inspector (the profiler plugin of NVIDIA/nccl) dumps into collector.nccl.dump-dir (A9, A10,
A12). Enabled by default and idle until that option names a directory; docs/nccl.md tells
how to switch the plugin on."""

# The catalog assembles every collector's METRICS, this one's included (catalog/nccl.py):
# import it first, so that importing this package's metrics module on its own never meets a
# half-built catalog.
import gpuwait.catalog  # noqa: F401

import re

from gpuwait.collectors import CollectorSpec, SourceSpec
from gpuwait.collectors.nccl.metrics import expose
from gpuwait.collectors.nccl.payload import NcclData
from gpuwait.collectors.nccl.source import NcclSource
from gpuwait.collectors.nccl.window import columns, summarize
from gpuwait.config import Option, Settings, parse_duration
from gpuwait.sources.base import HostPaths

_SIZE = re.compile(r"(\d+)\s*(B|KiB|MiB|GiB|kB|KB|MB|GB)?")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1000, "KB": 1000,
               "MB": 1000 ** 2, "GB": 1000 ** 3}
#: Below this a read budget shared among a few files holds less than a handful of records.
MIN_READ_BYTES = 64 * 1024


def parse_read_bytes(value) -> int:
    """'4MiB', '512KiB', '8MB' or a plain number of bytes, at least 64 KiB."""
    match = _SIZE.fullmatch(str(value).strip()) if not isinstance(value, bool) else None
    if match is None:
        raise ValueError(f"not a size (use e.g. 4MiB, 512KiB or a number of bytes): {value!r}")
    size = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    if size < MIN_READ_BYTES:
        raise ValueError(f"must be at least 64KiB: {value!r}")
    return size


def parse_count(value) -> int:
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(value) < 1:
        raise ValueError(f"must be a whole number >= 1: {value!r}")
    return int(value)


OPTIONS = (
    Option("collector.nccl.dump-dir", str, "",
           "Directory NCCL Inspector writes to (the jobs' NCCL_INSPECTOR_DUMP_DIR), read with its immediate "
           "subdirectories; empty: the collector reads nothing.", "PATH"),
    Option("collector.nccl.interval", parse_duration, 1.0, "How often the dump directory is read.", "DURATION"),
    Option("collector.nccl.max-bytes-per-read", parse_read_bytes, 4 << 20,
           "Most bytes read from the dump files per read; files that grew by more are skipped ahead "
           "(gpuwait_nccl_skipped_bytes_total).", "BYTES"),
    Option("collector.nccl.max-ranks", parse_count, 512,
           "Most (communicator, rank, process) entries tracked, and so series per metric.", "COUNT"),
    # PyTorch aborts a collective that has not finished after 10 minutes, the default timeout
    # of its NCCL process groups (pytorch/pytorch#110947): a hang stays visible until the
    # job's own watchdog ends it.
    Option("collector.nccl.stale-after", parse_duration, 900.0,
           "Ranks with no completed operation for this long are dropped, as are those whose dump file is gone.",
           "DURATION"),
)


def _source(settings: Settings) -> NcclSource:
    return NcclSource(
        HostPaths.from_settings(settings), settings["collector.nccl.dump-dir"],
        max_bytes_per_read=settings["collector.nccl.max-bytes-per-read"],
        max_ranks=settings["collector.nccl.max-ranks"], stale_after=settings["collector.nccl.stale-after"],
        history=settings.analysis_window,
    )


COLLECTOR = CollectorSpec(
    name="nccl",
    help="NCCL's own timing of collectives per rank (execution time, message size, bus bandwidth, last "
         "completion) from NCCL Inspector's dump files (A9, A10, A12).",
    sources=(SourceSpec("nccl", _source, columns, summarize, payload=NcclData,
                        interval_option="collector.nccl.interval"),),
    expose=expose,
)
