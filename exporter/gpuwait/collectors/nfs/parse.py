"""/proc/<pid>/mountstats: per-mount NFS client statistics.

Every mount of the reading process's namespace gets one header line, printed by
fs/proc_namespace.c::

    device <devname> mounted on <mountpoint> with fstype <type>[ <fs statistics>]

Device and mount point are escaped (space, tab, newline and backslash as ``\\ooo`` octal),
so the header splits on whitespace. Only NFS (fstype ``nfs`` or ``nfs4``) prints statistics
after the header: ``statvers=`` (1.0 on 2.6 kernels, whose ``xprt:`` lines lack the last three
slot-table fields; 1.1; 1.2 since Linux 5.16, a renamed event counter only) and then
tab-indented lines (fs/nfs/super.c nfs_show_stats, net/sunrpc/stats.c rpc_clnt_show_stats)::

    opts: age: [impl_id:] caps: [nfsv4:] sec: events: bytes: [fsc:]
    RPC iostats version: 1.1  p/v: 100003/4 (nfs)
    xprt: <tcp|udp|rdma|local> <numbers>      (one line per transport: nconnect gives several)
    per-op statistics
    <OPNAME>: ops trans timeouts bytes_sent bytes_recv queue_ms rtt_ms execute_ms [errors]

Per-op lines have 8 numbers before Linux 5.3 and 9 since (the count of calls that ended with
an error status; the header then says ``RPC iostats version: 1.1``). Lines this
parser does not know (vendor clients add some before ``per-op statistics``) are skipped.
Each mount block is parsed on its own: one unreadable block is reported, not fatal.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwait.collectors.nfs.payload import ByteCounters, OpCounters
from gpuwait.core.errors import ParseError

NFS_FSTYPES = ("nfs", "nfs4")
_U64_MAX = (1 << 64) - 1

#: fields of the ``bytes:`` line (include/linux/nfs_iostat.h, enum nfs_stat_bytecounters).
BYTE_FIELDS = (
    "normal_read", "normal_write", "direct_read", "direct_write",
    "server_read", "server_write", "read_pages", "write_pages",
)


@dataclass(frozen=True, slots=True)
class Transport:
    """One ``xprt:`` line. Fields a layout does not print are None (UDP has no connection;
    statvers 1.0 lacks the slot-table fields)."""

    protocol: str
    sends: int | None
    receives: int | None
    bad_xids: int | None
    connect_count: int | None
    #: cumulative sums, per send, of requests in flight and of requests in the backlog queue
    cumulative_active: int | None
    cumulative_backlog: int | None
    max_slots: int | None


@dataclass(frozen=True, slots=True)
class NfsMount:
    export: str
    mountpoint: str
    fstype: str
    statvers: str
    opts: dict[str, str]
    age_seconds: int | None
    bytes: ByteCounters
    events: tuple[int, ...]
    rpc_program: int | None
    rpc_version: int | None
    transports: tuple[Transport, ...]
    ops: dict[str, OpCounters]

    @property
    def nfs_version(self) -> str:
        """``vers=`` of the mount options (e.g. ``3``, ``4.2``), else the RPC program version."""
        vers = self.opts.get("vers")
        if vers:
            return vers
        return str(self.rpc_version) if self.rpc_version is not None else ""

    @property
    def protocol(self) -> str:
        if self.transports:
            return self.transports[0].protocol
        return self.opts.get("proto", "")


@dataclass(frozen=True, slots=True)
class DeviceBlock:
    """One header line and the indented lines that follow it."""

    lineno: int
    device: str
    mountpoint: str
    fstype: str
    statvers: str | None
    lines: tuple[str, ...]
    #: why the header itself could not be read; the block is then unusable
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class MountStats:
    #: NFS mounts in file order; a mount point listed twice (a mount stacked on another)
    #: appears once, as its last (top-most, visible) mount
    mounts: tuple[NfsMount, ...]
    #: NFS mounts hidden under a later mount on the same mount point
    shadowed: int
    #: (mount point, reason) for NFS blocks that could not be read; "" when unattributable
    rejected: tuple[tuple[str, str], ...]


def unescape(text: str) -> str:
    """Undo the kernel's ``\\ooo`` octal escapes (``\\040`` is a space)."""
    if "\\" not in text:
        return text
    out = []
    i, n = 0, len(text)
    while i < n:
        chunk = text[i + 1 : i + 4]
        if text[i] == "\\" and len(chunk) == 3 and chunk <= "377" and all(c in "01234567" for c in chunk):
            out.append(chr(int(chunk, 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _uint(token: str, what: str) -> int:
    # int() alone would take "1_000", "+5" and non-ASCII digits, none of which a kernel prints.
    if not (token.isascii() and token.isdigit()) or len(token) > 20:
        raise ParseError(f"{what}: not an unsigned integer: {token[:40]!r}")
    value = int(token)
    if value > _U64_MAX:
        raise ParseError(f"{what}: larger than 64 bits: {token!r}")
    return value


def _int(token: str, what: str) -> int:
    """Signed (the transport's idle time is printed with %ld)."""
    return -_uint(token[1:], what) if token.startswith("-") else _uint(token, what)


def _parse_header(lineno: int, line: str) -> tuple[str, str, str, str | None]:
    # Split on single spaces: the kernel prints exactly one between fields, and an empty
    # device name ("device  mounted on ...") must stay an empty field.
    words = line.rstrip().split(" ")
    if words[:2] == ["no", "device"]:
        device = ""
    elif words[0] == "device" and len(words) > 1:
        device = words[1]
    else:
        raise ParseError(f"line {lineno}: not a mount header: {line[:120]!r}")
    if len(words) < 8 or words[2:4] != ["mounted", "on"] or words[5:7] != ["with", "fstype"] or not words[7]:
        raise ParseError(f"line {lineno}: not a mount header: {line[:120]!r}")
    statvers = None
    for extra in words[8:]:
        if extra.startswith("statvers="):
            statvers = extra[len("statvers=") :]
    return unescape(device), unescape(words[4]), words[7], statvers


def split_devices(text: str) -> list[DeviceBlock]:
    """Cut the file into one block per mount. Never raises: a header that cannot be read
    yields a block whose ``problem`` says why, and the lines up to the next header go with it."""
    blocks: list[DeviceBlock] = []
    header: tuple[str, str, str, str | None] | None = None
    header_line = 0
    problem: str | None = None
    body: list[str] = []

    def close() -> None:
        if header is not None:
            blocks.append(DeviceBlock(header_line, *header, lines=tuple(body), problem=problem))
        elif problem is not None:
            blocks.append(DeviceBlock(header_line, "", "", "", None, tuple(body), problem))

    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line[0] in " \t":
            if header is None and problem is None:
                problem = f"line {lineno}: statistics before any mount header"
                header_line = lineno
            body.append(line)
            continue
        close()
        header_line, body, problem, header = lineno, [], None, None
        try:
            header = _parse_header(lineno, line)
        except ParseError as e:
            problem = str(e)
    close()
    return blocks


def _parse_opts(value: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for item in value.split(","):
        if not item:
            continue
        key, _, val = item.partition("=")
        opts[key] = val
    return opts


def _parse_transport(words: list[str], lineno: int) -> Transport:
    if len(words) < 2:
        raise ParseError(f"line {lineno}: xprt line without a protocol")
    protocol = words[1]
    numbers = [_int(w, f"line {lineno} xprt") for w in words[2:]]

    def at(i: int) -> int | None:
        return numbers[i] if i < len(numbers) else None

    # Leading fields per layout (net/sunrpc/xprtsock.c, xprtrdma/transport.c); statvers 1.0
    # stops before the three slot-table fields.
    if protocol in ("tcp", "rdma"):
        need, conn, sends, slots = 10, 2, 5, 10
    elif protocol == "udp":
        need, conn, sends, slots = 7, None, 2, 7
    elif protocol == "local":
        need, conn, sends, slots = 9, 1, 4, 9
    else:
        return Transport(protocol, None, None, None, None, None, None, None)
    if len(numbers) < need:
        raise ParseError(f"line {lineno}: xprt {protocol} has {len(numbers)} numbers, need at least {need}")
    return Transport(
        protocol=protocol,
        sends=numbers[sends],
        receives=numbers[sends + 1],
        bad_xids=numbers[sends + 2],
        connect_count=numbers[conn] if conn is not None else None,
        cumulative_active=numbers[sends + 3],
        cumulative_backlog=numbers[sends + 4],
        max_slots=at(slots) if protocol != "rdma" else None,
    )


def _parse_rpc_program(words: list[str], lineno: int) -> tuple[int, int]:
    # "RPC iostats version: 1.1  p/v: 100003/4 (nfs)"
    try:
        program, slash, version = words[words.index("p/v:") + 1].partition("/")
    except (ValueError, IndexError):
        raise ParseError(f"line {lineno}: RPC line without p/v: {' '.join(words)[:120]!r}") from None
    if not slash:
        raise ParseError(f"line {lineno}: p/v is not program/version")
    return _uint(program, f"line {lineno} program"), _uint(version, f"line {lineno} version")


def _parse_op(words: list[str], lineno: int) -> tuple[str, OpCounters]:
    name = words[0][:-1]
    if not words[0].endswith(":") or not name:
        raise ParseError(f"line {lineno}: not a per-op line: {' '.join(words)[:120]!r}")
    if len(words) < 9:
        raise ParseError(f"line {lineno}: {name} has {len(words) - 1} numbers, need at least 8")
    what = f"line {lineno} {name}"
    v = [_uint(w, what) for w in words[1:10]]
    return name, OpCounters(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8] if len(v) > 8 else None)


def parse_nfs_block(block: DeviceBlock) -> NfsMount:
    """The statistics of one NFS mount block; ParseError if the block is not what the kernel prints."""
    if block.problem is not None:
        raise ParseError(block.problem)
    if block.fstype not in NFS_FSTYPES:
        raise ParseError(f"line {block.lineno}: fstype {block.fstype!r} is not NFS")
    if block.statvers is None:
        raise ParseError(f"line {block.lineno}: NFS mount without statvers")
    opts: dict[str, str] = {}
    age = None
    byte_counters: ByteCounters | None = None
    events: tuple[int, ...] = ()
    program = version = None
    transports: list[Transport] = []
    ops: dict[str, OpCounters] = {}
    in_ops = False
    for offset, line in enumerate(block.lines, 1):
        lineno = block.lineno + offset
        words = line.split()
        if not words:
            continue
        key = words[0]
        if in_ops:
            name, counters = _parse_op(words, lineno)
            if name in ops:
                raise ParseError(f"line {lineno}: {name} listed twice")
            ops[name] = counters
        elif key == "per-op" and words[1:2] == ["statistics"]:
            in_ops = True
        elif key == "bytes:":
            values = [_uint(w, f"line {lineno} bytes") for w in words[1:]]
            if len(values) < len(BYTE_FIELDS):
                raise ParseError(f"line {lineno}: bytes has {len(values)} numbers, need {len(BYTE_FIELDS)}")
            byte_counters = ByteCounters(*values[: len(BYTE_FIELDS)])
        elif key == "events:":
            events = tuple(_uint(w, f"line {lineno} events") for w in words[1:])
        elif key == "opts:":
            opts = _parse_opts(words[1] if len(words) > 1 else "")
        elif key == "age:":
            if len(words) != 2:
                raise ParseError(f"line {lineno}: age should have one value")
            age = _uint(words[1], f"line {lineno} age")
        elif key == "xprt:":
            transports.append(_parse_transport(words, lineno))
        elif key == "RPC":
            program, version = _parse_rpc_program(words, lineno)
    if program is not None and not in_ops:
        raise ParseError(f"line {block.lineno}: RPC statistics of {block.mountpoint!r} end before the per-op section")
    if byte_counters is None:
        raise ParseError(f"line {block.lineno}: NFS mount {block.mountpoint!r} has no bytes line")
    return NfsMount(
        export=block.device,
        mountpoint=block.mountpoint,
        fstype=block.fstype,
        statvers=block.statvers,
        opts=opts,
        age_seconds=age,
        bytes=byte_counters,
        events=events,
        rpc_program=program,
        rpc_version=version,
        transports=tuple(transports),
        ops=ops,
    )


def parse_mountstats(text: str) -> MountStats:
    """All NFS mounts of a mountstats text. Blocks of other filesystems are skipped; an NFS
    block that cannot be read is listed in ``rejected`` and left out. ParseError only when
    the text has lines but not one of them is a mount header (not a mountstats file)."""
    blocks = split_devices(text)
    if blocks and all(b.problem is not None for b in blocks):
        raise ParseError(blocks[0].problem or "no mount header")
    by_mountpoint: dict[str, NfsMount] = {}
    shadowed = 0
    rejected: list[tuple[str, str]] = []
    for block in blocks:
        if block.problem is None and block.fstype not in NFS_FSTYPES:
            continue
        try:
            mount = parse_nfs_block(block)
        except ParseError as e:
            rejected.append((block.mountpoint, str(e)))
            continue
        if mount.mountpoint in by_mountpoint:
            shadowed += 1
        by_mountpoint[mount.mountpoint] = mount
    return MountStats(tuple(by_mountpoint.values()), shadowed, tuple(rejected))
