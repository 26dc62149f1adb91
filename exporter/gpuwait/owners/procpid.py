"""/proc/<pid>/stat, /proc/<pid>/task/<tid>/stat and .../children (proc(5)); A2, A3.

The second field, the command name, is printed raw between parentheses: any process may name
itself "a) R 1 (b" with prctl(PR_SET_NAME), spaces, parentheses and newlines included. The
name therefore runs from the first '(' to the LAST ')'; every later field is a plain number
or the one-letter state.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwait.core.errors import ParseError

#: Scheduler states as the kernel prints them (fs/proc/array.c task_state_array; W, K and x
#: only on kernels before 4.14, P and I since 4.14).
STATES = frozenset("RSDTtZXxKWPI")

# 0-based positions in the fields after the closing ')': field n of proc(5) is at n - 3.
_STATE, _PPID, _UTIME, _STIME, _CUTIME, _CSTIME, _NUM_THREADS, _STARTTIME, _PROCESSOR = (
    0, 1, 11, 12, 13, 14, 17, 19, 36
)


@dataclass(frozen=True, slots=True)
class PidStat:
    #: the process id for /proc/<pid>/stat, the thread id for .../task/<tid>/stat
    pid: int
    comm: str
    state: str
    ppid: int
    #: clock ticks (USER_HZ). For a process: all its threads, dead ones included; for a thread:
    #: that thread only.
    utime: int
    stime: int
    #: clock ticks of children this process has waited for
    cutime: int
    cstime: int
    num_threads: int
    #: clock ticks after boot at which the process started; with pid, it names one process
    #: across pid reuse
    starttime: int
    #: CPU the task last ran on; None on kernels too old to print it (before 2.2.8)
    processor: int | None


def _uint(text: str, name: str) -> int:
    # int() alone would accept "+1", "1_0" and non-ASCII digits, none of which the kernel prints.
    if not (text.isascii() and text.isdigit()):
        raise ParseError(f"{name} is not a non-negative integer: {text!r}")
    return int(text)


def _int(text: str, name: str) -> int:
    return -_uint(text[1:], name) if text.startswith("-") else _uint(text, name)


def parse_pid_stat(text: str) -> PidStat:
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        raise ParseError("no parenthesised command name")
    pid = _uint(text[:open_at].strip(), "pid")
    comm = text[open_at + 1 : close_at]
    rest = text[close_at + 1 :].split()
    if len(rest) <= _STARTTIME:
        raise ParseError(f"{len(rest) + 2} fields, need at least {_STARTTIME + 3}")
    state = rest[_STATE]
    if state not in STATES:
        raise ParseError(f"unknown state {state!r}")
    return PidStat(
        pid=pid,
        comm=comm,
        state=state,
        # ppid is 0 for the init process and for kernel threads' parent, never negative
        ppid=_uint(rest[_PPID], "ppid"),
        utime=_uint(rest[_UTIME], "utime"),
        stime=_uint(rest[_STIME], "stime"),
        # cutime/cstime are printed signed (clock_t) though the kernel never makes them negative
        cutime=max(0, _int(rest[_CUTIME], "cutime")),
        cstime=max(0, _int(rest[_CSTIME], "cstime")),
        num_threads=_uint(rest[_NUM_THREADS], "num_threads"),
        starttime=_uint(rest[_STARTTIME], "starttime"),
        processor=_uint(rest[_PROCESSOR], "processor") if len(rest) > _PROCESSOR else None,
    )


def parse_task_state(text: str) -> tuple[str, int | None]:
    """(state, last CPU) from a stat line: all a thread's line is read for, every tick."""
    close_at = text.rfind(")")
    if close_at < 0 or text.find("(") < 0 or text.find("(") > close_at:
        raise ParseError("no parenthesised command name")
    rest = text[close_at + 1 :].split(None, _PROCESSOR + 1)
    if len(rest) <= _STARTTIME:
        raise ParseError(f"{len(rest) + 2} fields, need at least {_STARTTIME + 3}")
    state = rest[_STATE]
    if state not in STATES:
        raise ParseError(f"unknown state {state!r}")
    return state, _uint(rest[_PROCESSOR], "processor") if len(rest) > _PROCESSOR else None


def parse_ppid(text: str) -> tuple[int, int]:
    """(pid, ppid) from a stat line, without the rest: for scanning every process on the host."""
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        raise ParseError("no parenthesised command name")
    rest = text[close_at + 1 :].split(None, 3)
    if len(rest) < 2:
        raise ParseError("no ppid field")
    if rest[0] not in STATES:
        raise ParseError(f"unknown state {rest[0]!r}")
    return _uint(text[:open_at].strip(), "pid"), _uint(rest[1], "ppid")


def parse_children(text: str) -> list[int]:
    """/proc/<pid>/task/<tid>/children: the pids of that thread's children, space separated."""
    return [_uint(p, "child pid") for p in text.split()]


def parse_uptime(text: str) -> float:
    """/proc/uptime: seconds since boot (first of two numbers), the clock starttime counts on."""
    parts = text.split()
    if len(parts) != 2:
        raise ParseError(f"expected two numbers, got {len(parts)} fields")
    head, _, frac = parts[0].partition(".")
    if not (head.isascii() and head.isdigit()) or (frac and not (frac.isascii() and frac.isdigit())):
        raise ParseError(f"uptime is not a decimal number: {parts[0]!r}")
    return float(parts[0])


def parse_io_read_bytes(text: str) -> int:
    """``read_bytes`` of /proc/<pid>/io (proc(5)): bytes the process caused to be fetched from
    the block layer, O_DIRECT reads included (the kernel counts them as it submits each read
    bio); page cache hits are not in it. A counter over the process's life, so no read of it
    misses a read phase, as a snapshot of thread states can."""
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip() == "read_bytes":
            return _uint(value.strip(), "read_bytes")
    raise ParseError("no read_bytes line")

