"""The self-check's report: one row per phase (expected, the verdict over its settled part,
the evidence, agree or not), as a table and as JSON, and the exit code."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

AGREE, DISAGREE, SKIPPED, ERROR = "agree", "disagree", "skipped", "error"
#: Exit codes: every phase that ran agrees / one disagrees / the check could not be made.
OK, DISAGREES, SETUP_ERROR = 0, 1, 2
FORMAT = "gpuwait-selfcheck"
VERSION = 1


@dataclass
class PhaseResult:
    name: str
    title: str
    expected: str
    accepted: list[str]
    status: str
    reason: str = ""
    verdict: str | None = None
    #: share of the settled reads that named the verdict
    held: float | None = None
    verdicts: list[str | None] = field(default_factory=list)
    waits: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, object] = field(default_factory=dict)
    #: shown first in the table
    evidence_keys: list[str] = field(default_factory=list)
    #: what the workload measured of itself over the settled part (shares of wall time, rates)
    measured: dict[str, float] = field(default_factory=dict)
    truth_keys: list[str] = field(default_factory=list)
    #: the workload's sizing, as it reported when ready
    setup: dict[str, object] = field(default_factory=dict)
    quota: dict[str, object] = field(default_factory=dict)
    replayed_verdict: str | None = None
    replayed_evidence: list[str] = field(default_factory=list)
    replay_error: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Report:
    host: str
    created: str
    gpuwait_version: str
    gpu: dict[str, object]
    settings: dict[str, object]
    phases: list[PhaseResult]
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.error or any(p.status == ERROR for p in self.phases):
            return SETUP_ERROR
        if any(p.status == DISAGREE for p in self.phases):
            return DISAGREES
        return OK

    def to_dict(self) -> dict:
        out = {"format": FORMAT, "version": VERSION, **asdict(self)}
        out["exit_code"] = self.exit_code
        for phase in out["phases"]:
            phase.pop("evidence_keys")
            phase.pop("truth_keys")
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _pct(x) -> str:
    return "?" if x is None else f"{round(100 * x)}%"


def _num(x, digits: int = 1) -> str:
    return "?" if x is None else f"{x:.{digits}f}"


def _gb(x) -> str:
    return "?" if x is None else f"{x / 1e9:.1f} GB/s"


def evidence_text(key: str, value) -> str | None:
    if value is None:
        return None
    if key == "disk":
        return (f"disk {value.get('device')} queue {_num(value.get('queue_depth'))},"
                f" {_num(value.get('reads_per_second'), 0)} reads/s")
    if key == "pcie":
        gen, width = value.get("generation"), value.get("width")
        link = f" on Gen{_num(gen, 0)} x{_num(width, 0)}" if gen is not None else ""
        return f"PCIe rx {_gb(value.get('rx_bytes_per_second'))} tx {_gb(value.get('tx_bytes_per_second'))}{link}"
    labels = {"idle": "idle", "utilization": "util", "sm_active": "SM active", "throttled_busy": "throttled",
              "cpu_pressure": "CPU pressure", "io_pressure": "IO pressure", "busiest_core": "busiest core"}
    if key in labels:
        return f"{labels[key]} {_pct(value)}"
    if key == "demand":
        return "demand" if value >= 0.5 else "no demand"
    if key == "owner_cores":
        return f"owner {_num(value, 2)} cores"
    if key == "saturated_cores":
        return f"{_num(value)} cores saturated"
    return f"{key} {value}"


def truth_text(key: str, measured: dict[str, float]) -> str | None:
    names = {
        "data_wait_seconds": ("data_wait_share", "the loop waited for its next batch {}"),
        "copy_seconds": ("copy_share", "pageable copies took {} of the time"),
        "launch_seconds": ("launch_share", "the thread launched kernels {} of the time"),
    }
    if key in names:
        share, text = names[key]
        return text.format(_pct(measured.get(share))) if share in measured else None
    rates = {"batches": "batches/s", "records": "records/s", "kernels": "kernels/s"}
    if key in rates and f"{key}_per_second" in measured:
        return f"{_num(measured[f'{key}_per_second'])} {rates[key]}"
    if key == "matmul_flops" and "matmul_flops_per_second" in measured:
        return f"{measured['matmul_flops_per_second'] / 1e12:.0f} TFLOP/s"
    if key == "copied_bytes" and "copy_bytes_per_second" in measured:
        return f"copies at {_gb(measured['copy_bytes_per_second'])}"
    return None


def _measured_line(p: PhaseResult) -> str:
    parts = [t for t in (truth_text(k, p.measured) for k in p.truth_keys) if t]
    if "gpu_busy_share" in p.measured:
        parts.insert(0, f"GPU kernels busy {_pct(p.measured['gpu_busy_share'])} (CUDA events)")
    if "cores" in p.measured:
        parts.append(f"process tree {_num(p.measured['cores'], 2)} cores")
    if p.quota.get("nr_periods"):
        throttled = p.quota.get("nr_throttled", 0) / p.quota["nr_periods"]
        parts.append(f"cgroup throttled in {_pct(throttled)} of its periods")
    return "; ".join(parts)


def _table(report: Report) -> list[str]:
    rows = [("phase", "expected", "verdict (held)", "replayed", "result", "evidence")]
    for p in report.phases:
        verdict = "-" if p.verdict is None else f"{p.verdict} ({_pct(p.held)})"
        shown = [t for t in (evidence_text(k, p.evidence.get(k)) for k in p.evidence_keys) if t]
        rows.append((p.name, "/".join(p.accepted), verdict, p.replayed_verdict or "-", p.status, ", ".join(shown)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows] + [""]


def _details(p: PhaseResult) -> list[str]:
    detail = [p.reason] if p.reason else []
    measured = _measured_line(p)
    if measured:
        detail.append(f"measured by the workload: {measured}")
    if p.replayed_evidence:
        detail.append("replayed diagnosis: " + "; ".join(e.strip() for e in p.replayed_evidence))
    if p.replay_error:
        detail.append(f"replay: {p.replay_error}")
    return [f"{p.name}:", *(f"  {d}" for d in detail)] if detail else []


def render_text(report: Report) -> str:
    gpu = report.gpu
    s = report.settings
    lines = [f"gpuwait selfcheck on {report.host}: GPU {gpu.get('index')} {gpu.get('device') or ''}"
             f" {gpu.get('uuid') or ''}".rstrip(),
             f"window {s.get('window_seconds'):g} s, {s.get('phase_seconds'):g} s read per phase after"
             f" {s.get('settle_seconds'):g} s of settling; {report.seconds:.0f} s in all", ""]
    if report.phases:
        lines.extend(_table(report))
    for p in report.phases:
        lines.extend(_details(p))
    if report.notes:
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in report.notes)
    if report.error:
        lines.append(f"error: {report.error}")
    verdict = {OK: "every phase agrees", DISAGREES: "a phase disagrees: attach the output folder to a bug report",
               SETUP_ERROR: "the check could not be completed"}[report.exit_code]
    lines.append(f"result: {verdict} (exit code {report.exit_code}); report, traces and logs in {s.get('out')}")
    return "\n".join(lines) + "\n"
