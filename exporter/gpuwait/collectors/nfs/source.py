"""NFS client statistics per mount, from <procfs>/self/mountstats (A6, A7).

A dataset on an NFS server shows its cost here: per-operation latency (queue, round trip,
total execution) says whether the remote storage is slow, and the mix of operations says
whether the workload reads large files (READ dominates) or many small ones (GETATTR,
LOOKUP, ACCESS and OPEN dominate: metadata, A7).

The file is a few KB per NFS mount and the kernel builds it by walking the mount table, so
it is read on the slow tier.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from gpuwait.collectors.nfs.parse import parse_mountstats
from gpuwait.collectors.nfs.payload import NfsData, NfsMountData
from gpuwait.core.config import Option, Settings
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.core.pseudofile import read_text
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source

#: The operations a training job's reads go through: open/stat/read of dataset files, and
#: the write path of checkpoints.
DEFAULT_OPS = ("READ", "GETATTR", "LOOKUP", "OPEN", "ACCESS", "READDIR", "READDIRPLUS", "WRITE", "COMMIT")
#: Operations that move no file data: their share of all operations tells a many-small-files
#: workload (each file costs a LOOKUP, GETATTR, ACCESS and, over NFSv4, an OPEN) from a
#: large-file one. NFSv3 has no OPEN; the others exist in both versions.
METADATA_OPS = ("GETATTR", "LOOKUP", "ACCESS", "OPEN")

_OP_NAME = re.compile(r"^[A-Z0-9_]+$")


def parse_op_list(value: Any) -> str:
    """A comma-separated list (or a YAML list) of RPC procedure names, as the kernel spells
    them (upper case); returned normalised as one comma-separated string."""
    items: Iterable[Any] = value if isinstance(value, (list, tuple)) else str(value).split(",")
    names: list[str] = []
    for item in items:
        name = str(item).strip().upper()
        if not name:
            continue
        if not _OP_NAME.match(name):
            raise ValueError(f"not an NFS operation name: {item!r}")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("name at least one NFS operation, e.g. READ,GETATTR")
    return ",".join(names)


MOUNTSTATS_PATH = Option(
    "collector.nfs.mountstats-path", str, "self/mountstats",
    "mountstats file of the NFS collector, relative to --path.procfs (an absolute path is used as is)."
    " self/mountstats lists the mounts of the exporter's own mount namespace; in a container with the"
    " host's /proc mounted and hostPID, 1/mountstats lists the host's (mode 0400, owned by root: readable"
    " by user 0 without capabilities, or by another user with CAP_DAC_READ_SEARCH).",
    "PATH",
)
OPS = Option(
    "collector.nfs.ops", parse_op_list, ",".join(DEFAULT_OPS),
    "Comma-separated NFS operations published per mount (names as in mountstats, e.g. READ,GETATTR).",
    "OPS",
)


class NfsSource(Source):
    name = "nfs"
    tier = "slow"

    def __init__(self, paths: HostPaths, mountstats_path: str = "self/mountstats", ops: Iterable[str] = DEFAULT_OPS) -> None:
        super().__init__(paths)
        self.path = paths.proc(mountstats_path)
        self.ops = tuple(ops)

    @classmethod
    def from_settings(cls, settings: Settings) -> "NfsSource":
        return cls(HostPaths.from_settings(settings), settings[MOUNTSTATS_PATH], settings[OPS].split(","))

    def read(self) -> Reading:
        t = time.monotonic()
        text = read_text(self.path)
        try:
            parsed = parse_mountstats(text)
        except ParseError as e:
            raise SourceError(f"parse:{self.path}", str(e)) from None
        mounts: dict[str, NfsMountData] = {}
        for mount in parsed.mounts:
            ops = mount.ops
            mounts[mount.mountpoint] = NfsMountData(
                export=mount.export,
                fstype=mount.fstype,
                version=mount.nfs_version,
                protocol=mount.protocol,
                bytes=mount.bytes,
                ops={op: ops[op] for op in self.ops if op in ops},
                metadata_ops=sum(ops[op].ops for op in METADATA_OPS if op in ops),
                all_ops=sum(c.ops for c in ops.values()),
            )
        if not mounts and not parsed.rejected and not parsed.shadowed:
            raise NoData(f"unavailable:{self.path}", "no NFS mount in this mount namespace")
        errors = tuple(f"parse:{self.path}:{mountpoint or '?'}" for mountpoint, _ in parsed.rejected)
        return self.reading(t, NfsData(mounts, parsed.shadowed), errors)
