"""/proc/stat: per-CPU time in USER_HZ ticks, and the scheduler's run-queue figures."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import truediv

from gpuwait.core.errors import ParseError

#: Column order of the cpu lines (proc(5)); older kernels stop early, newer ones may add more.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


#: The columns of a cpu line the careful parser requires to be integers (ASCII digits here).
_CHECKED = 1 + len(CPU_MODES)
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
    """For a line that does not start with ``cpu`` (the parsers split those at once): its
    fields if it is an indented cpu line or one of _SINGLE_FIELDS, else None. The others
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
                 ) -> tuple[dict[str, dict[str, float]], int | None, int | None] | None:
    """Each core's first ``len(modes)`` modes in seconds (the all-CPU line left out), and the
    run-queue figures, for a file in the shape every kernel prints; None for any other, which
    ``parse_proc_stat`` then reads line by line and accounts for.

    The 10 Hz read of a node's /proc/stat is one line per core: on a 192-core node the careful
    parser and a second pass to convert its ticks cost several times this single pass, which
    builds each core's modes once. What it takes as the usual shape: ASCII without a minus sign,
    every ``cpu`` line a known core number listed once with at least four integer columns, and
    the run-queue lines one integer each; anything else, and the careful parser decides."""
    if "-" in text or not text.isascii():
        return None
    cores: dict[str, dict[str, float]] = {}
    fields: dict[str, int] = {}
    all_cpus = False
    per_tick = repeat(float(ticks_per_second))
    width = len(modes) + 1
    try:
        for line in text.splitlines():
            parts = line.split() if line.startswith("cpu") else _split_if_wanted(line)
            if not parts:
                continue
            key = parts[0]
            if key.startswith("cpu"):
                name = key[3:]
                if len(parts) < 5:
                    return None
                if not name:
                    if all_cpus:
                        return None
                    all_cpus = True
                    if not "".join(parts[1:_CHECKED]).isdigit():  # the careful parser's check
                        return None
                    continue
                if not (name.isascii() and name.isdigit()) or name in cores:
                    return None
                cores[name] = dict(zip(modes, map(truediv, map(int, parts[1:width]), per_tick)))
                if width < len(parts) and width < _CHECKED and not "".join(parts[width:_CHECKED]).isdigit():
                    return None
            elif key in _SINGLE_FIELDS:
                if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
                    return None
                fields[key] = int(parts[1])
    except ValueError:
        return None
    if not cores:
        return None
    return cores, fields.get("procs_running"), fields.get("procs_blocked")
