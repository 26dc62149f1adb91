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


def parse_proc_stat(text: str) -> ProcStat:
    cpus: dict[str, dict[str, int]] = {}
    fields: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        key = parts[0]
        if key.startswith("cpu"):
            name = key[3:] or "cpu"
            if name != "cpu" and not name.isdigit():
                raise ParseError(f"line {lineno}: unexpected cpu name {key!r}")
            if len(parts) < 5:
                raise ParseError(f"line {lineno}: cpu line has {len(parts) - 1} columns, need at least 4")
            try:
                values = [int(v) for v in parts[1 : 1 + len(CPU_MODES)]]
            except ValueError:
                raise ParseError(f"line {lineno}: non-integer cpu time in {line!r}") from None
            if any(v < 0 for v in values):
                raise ParseError(f"line {lineno}: negative cpu time")
            if name in cpus:
                raise ParseError(f"line {lineno}: {key} listed twice")
            cpus[name] = dict(zip(CPU_MODES, values))
        elif key in ("procs_running", "procs_blocked", "ctxt", "btime"):
            if len(parts) != 2:
                raise ParseError(f"line {lineno}: {key} should have one value")
            try:
                fields[key] = int(parts[1])
            except ValueError:
                raise ParseError(f"line {lineno}: {key} is not an integer") from None
    if not cpus:
        raise ParseError("no cpu lines")
    return ProcStat(
        cpus=cpus,
        procs_running=fields.get("procs_running"),
        procs_blocked=fields.get("procs_blocked"),
        context_switches=fields.get("ctxt"),
        boot_time=fields.get("btime"),
    )
