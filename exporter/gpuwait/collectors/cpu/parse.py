"""/proc/stat: per-CPU time in USER_HZ ticks, and the scheduler's run-queue figures."""

from __future__ import annotations

from dataclasses import dataclass

from gpuwait.core.errors import ParseError

#: Column order of the cpu lines (proc(5)); older kernels stop early, newer ones may add more.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


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
        parts = line.split()
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
        elif key in ("procs_running", "procs_blocked", "ctxt", "btime"):
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
