"""/proc/stat: per-CPU time in USER_HZ ticks, and the scheduler's run-queue figures."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import truediv

from gpuwait.collectors.cpu.payload import CoreTable
from gpuwait.core.errors import ParseError

#: Column order of the cpu lines (proc(5)); older kernels stop early, newer ones may add more.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")

#: The one-integer lines the careful parser reads (and counts as bad when they are not).
_SINGLE_FIELDS = frozenset(("procs_running", "procs_blocked", "ctxt", "btime"))


@dataclass(frozen=True, slots=True)
class ProcStat:
    #: "cpu" for the all-CPU line, "0", "1", ... per core -> {mode: ticks}
    cpus: dict[str, dict[str, int]]
    procs_running: int | None
    procs_blocked: int | None
    context_switches: int | None
    boot_time: int | None
    #: One entry per line that could not be parsed: the line's own key (``cpu7``, ``ctxt``, or
    #: ``line 12``) and why. Its series are left out; every other line's are kept.
    bad_lines: tuple[tuple[str, str], ...] = ()


def _split_if_wanted(line: str) -> list[str] | None:
    """A line's fields if it is a cpu line (indented or not) or one of _SINGLE_FIELDS, else
    None (the careful parser splits a line that starts with ``cpu`` at once). The others
    are not split: ``intr`` has a count per IRQ number the kernel can hand out, thousands on a
    big node (x86 sizes them at 8 per CPU plus 16 per IO-APIC pin), which would cost more to
    split than every cpu line together."""
    head = line.split(None, 1)
    if head and (head[0].startswith("cpu") or head[0] in _SINGLE_FIELDS):
        return line.split()
    return None


def _cpu_line(lineno: int, key: str, parts: list[str]) -> tuple[str, dict[str, int]]:
    name = key[3:] or "cpu"
    if name != "cpu" and not (name.isascii() and name.isdigit()):
        raise ParseError(f"line {lineno}: unexpected cpu name {key!r}")
    if len(parts) < 5:
        raise ParseError(f"line {lineno}: cpu line has {len(parts) - 1} columns, need at least 4")
    try:
        values = list(map(int, parts[1 : 1 + len(CPU_MODES)]))
    except ValueError:
        raise ParseError(f"line {lineno}: non-integer cpu time in {' '.join(parts)!r}") from None
    if min(values) < 0:
        raise ParseError(f"line {lineno}: negative cpu time")
    return name, dict(zip(CPU_MODES, values))


def parse_proc_stat(text: str) -> ProcStat:
    """Every line that parses; a malformed line costs its own series only (as node_exporter
    keeps the other cores when one line is short). ParseError only when no cpu line parses."""
    cpus: dict[str, dict[str, int]] = {}
    fields: dict[str, int] = {}
    bad: list[tuple[str, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split() if line.startswith("cpu") else _split_if_wanted(line)
        if not parts:
            continue
        key = parts[0]
        if key.startswith("cpu"):
            try:
                name, ticks = _cpu_line(lineno, key, parts)
            except ParseError as e:
                name_ok = key[3:].isascii() and key[3:].isdigit() or key == "cpu"
                bad.append((key if name_ok else f"line {lineno}", str(e)))
                continue
            if name in cpus:
                # Which of the two is right cannot be told: neither is kept.
                bad.append((key, f"line {lineno}: {key} listed twice"))
                del cpus[name]
                continue
            cpus[name] = ticks
        elif key in _SINGLE_FIELDS:
            value = parts[1] if len(parts) == 2 else ""
            if not (value.isascii() and value.isdigit()):
                bad.append((key, f"line {lineno}: {key} should have one integer value"))
                continue
            fields[key] = int(value)
    if not cpus:
        raise ParseError("no cpu line could be parsed" + (f" ({bad[0][1]})" if bad else ""))
    return ProcStat(
        cpus=cpus,
        procs_running=fields.get("procs_running"),
        procs_blocked=fields.get("procs_blocked"),
        context_switches=fields.get("ctxt"),
        boot_time=fields.get("btime"),
        bad_lines=tuple(bad),
    )


def core_seconds(text: str, modes: tuple[str, ...], ticks_per_second: float
                 ) -> tuple[CoreTable, int | None, int | None] | None:
    """Each core's first ``len(modes)`` modes in seconds (the all-CPU line left out), and the
    run-queue figures, for a file in the shape every kernel prints; None for any other, which
    ``parse_proc_stat`` then reads line by line and accounts for.

    The 10 Hz read of a node's /proc/stat is one line per core. Every kernel prints the cpu
    lines first and each with the same number of columns, so one split of that block lays the
    values out with a fixed stride: each mode is a slice of it, converted in C, where a line at
    a time costs a split, a list and a dict per core (several times as much on 192 cores). What
    it takes as the usual shape: ASCII without a minus sign, the cpu lines at the top with one
    width of at least four columns of digits, each a known core number listed once, no cpu line
    further down, and the run-queue lines one integer each; anything else, and the careful
    parser decides."""
    if "-" in text or not text.isascii():
        return None
    last = text.rfind("\ncpu")
    end = text.find("\n", last + 1) if last >= 0 else text.find("\n")
    if end < 0:
        end = len(text)
    block = text[:end]
    tokens = block.split()
    width = len(block[:block.find("\n")].split()) if last >= 0 else len(tokens)
    lines = block.count("\n") + 1
    # Any other line break (a carriage return, a form feed) would part lines the careful
    # parser reads apart.
    if width < 5 or len(tokens) != width * lines or len(block.splitlines()) != lines:
        return None
    names = tokens[::width]
    del tokens[::width]  # what is left: width - 1 numbers a line
    # Every name "cpu" and a core number (or none), every other token digits: a line of
    # another width would put a number where a name belongs, or a name among the numbers.
    cores = [name[3:] for name in names]
    if not "".join(tokens).isdigit() or not all(map(str.startswith, names, repeat("cpu"))):
        return None
    if not "".join(cores).isdigit() or len(set(names)) != lines:
        return None
    fields: dict[str, int] = {}
    for line in text[end:].splitlines():
        parts = _split_if_wanted(line)
        if not parts:
            continue
        if parts[0].startswith("cpu"):
            return None
        if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
            return None
        fields[parts[0]] = int(parts[1])
    first = 1 if names[0] == "cpu" else 0
    if first == lines or "cpu" in names[first:]:
        return None
    per_tick = repeat(float(ticks_per_second))
    stride = width - 1
    start = first * stride
    # Ticks divided as ints, as the careful parser's are: an int divided by a float is rounded
    # from the exact int (PyLong_AsDouble), the same double as float() of its digits, and
    # int() of a short string of digits takes about half of float()'s time (no strtod).
    columns = [list(map(truediv, map(int, tokens[start + k::stride]), per_tick)) for k in range(min(stride, len(modes)))]
    table = CoreTable(cores[first:], modes[:len(columns)], columns)
    return table, fields.get("procs_running"), fields.get("procs_blocked")
