"""From the exporter's /metrics during a phase's settled part to the phase's verdict and the
evidence it rests on, and from ``gpuwait diagnose --trace --json`` to the replayed verdict.

Only published series are read (docs/metrics.md), by name, as any Prometheus user reads them;
a series that is absent is reported as absent, never guessed.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuwait.selfcheck.children import Metrics

#: Window statistics of a GPU (labels gpu, uuid), by evidence key.
GPU_SERIES = {
    "utilization": "gpuwait_gpu_window_utilization_mean_ratio",
    "sm_active": "gpuwait_gpu_window_sm_active_mean_ratio",
    "throttled_busy": "gpuwait_gpu_throttled_busy_ratio",
    "demand": "gpuwait_gpu_demand",
    "samples": "gpuwait_gpu_verdict_samples",
}
#: Evidence keys in the order the table prints them.
EVIDENCE = ("idle", "utilization", "sm_active", "throttled_busy", "demand", "owner_cores", "saturated_cores",
            "busiest_core", "cpu_pressure", "io_pressure", "disk", "pcie")


def normal_uuid(uuid: str | None) -> str:
    return (uuid or "").lower().removeprefix("gpu-")


@dataclass(frozen=True)
class GpuKey:
    gpu: str
    uuid: str


def find_gpu(metrics: Metrics, uuid: str | None, index: int) -> GpuKey | None:
    """The GPU the workload runs on, as the exporter labels it: by UUID where the workload
    reported one (CUDA's and NVML's numbering can differ), else by NVML index."""
    gpus = {(l.get("gpu", ""), l.get("uuid", "")) for l, _ in metrics.get("gpuwait_gpu_info", [])}
    if uuid:
        found = [g for g in gpus if normal_uuid(g[1]) == normal_uuid(uuid)]
    else:
        found = [g for g in gpus if g[0] == str(index)]
    return GpuKey(*found[0]) if found else None


def known_gpus(metrics: Metrics) -> list[str]:
    return sorted(f"{l.get('gpu')} ({l.get('uuid')})" for l, _ in metrics.get("gpuwait_gpu_info", []))


def _value(metrics: Metrics, name: str, **match: str) -> float | None:
    for labels, v in metrics.get(name, []):
        if all(labels.get(k) == m for k, m in match.items()) and not math.isnan(v):
            return v
    return None


def _of_gpu(metrics: Metrics, name: str, key: GpuKey) -> list[tuple[dict[str, str], float]]:
    return [(l, v) for l, v in metrics.get(name, []) if l.get("uuid") == key.uuid]


@dataclass
class Scrape:
    """One read of /metrics during the settled part: the GPU's verdict and what it rests on."""

    t: float
    verdict: str | None
    waits: dict[str, float]
    evidence: dict[str, object]
    owner_cpu_seconds: float | None
    owner_processes: float | None


def read(metrics: Metrics, key: GpuKey, t: float) -> Scrape:
    verdicts = [l["cause"] for l, v in _of_gpu(metrics, "gpuwait_gpu_verdict", key) if v == 1]
    waits = {l["cause"]: v for l, v in _of_gpu(metrics, "gpuwait_gpu_wait_ratio", key) if not math.isnan(v)}
    evidence: dict[str, object] = {"idle": sum(waits.values()) if waits else None}
    for name, series in GPU_SERIES.items():
        evidence[name] = _value(metrics, series, uuid=key.uuid)
    evidence["saturated_cores"] = _value(metrics, "gpuwait_cpu_window_saturated_cores")
    evidence["busiest_core"] = _value(metrics, "gpuwait_cpu_window_busy_max_ratio")
    evidence["cpu_pressure"] = _value(metrics, "gpuwait_pressure_window_stalled_ratio", resource="cpu", scope="some")
    evidence["io_pressure"] = _value(metrics, "gpuwait_pressure_window_stalled_ratio", resource="io", scope="some")
    disks = [(l.get("device", ""), v) for l, v in metrics.get("gpuwait_disk_window_queue_depth_mean", []) if not math.isnan(v)]
    if disks:
        device, depth = max(disks, key=lambda dv: (dv[1], dv[0]))
        evidence["disk"] = {"device": device, "queue_depth": depth,
                            "reads_per_second": _value(metrics, "gpuwait_disk_window_reads_per_second", device=device)}
    else:
        evidence["disk"] = None
    rx = _value(metrics, "gpuwait_gpu_window_pcie_throughput_bytes_per_second", uuid=key.uuid, direction="rx")
    tx = _value(metrics, "gpuwait_gpu_window_pcie_throughput_bytes_per_second", uuid=key.uuid, direction="tx")
    evidence["pcie"] = None if rx is None and tx is None else {
        "rx_bytes_per_second": rx, "tx_bytes_per_second": tx,
        "generation": _value(metrics, "gpuwait_gpu_pcie_link_generation", uuid=key.uuid),
        "width": _value(metrics, "gpuwait_gpu_pcie_link_width", uuid=key.uuid)}
    owners = {l.get("owner") for l, v in _of_gpu(metrics, "gpuwait_gpu_owner_info", key) if v == 1}
    cpu = [v for l, v in metrics.get("gpuwait_gpu_owner_cpu_seconds_total", []) if l.get("owner") in owners]
    processes = [v for _, v in _of_gpu(metrics, "gpuwait_gpu_owner_processes", key)]
    return Scrape(t, verdicts[0] if len(verdicts) == 1 else None, waits, evidence,
                  sum(cpu) if cpu else None, sum(processes) if processes else (0.0 if owners == set() else None))


def _mean(values: Sequence[float]) -> float | None:
    found = [v for v in values if v is not None]
    return sum(found) / len(found) if found else None


def _mean_evidence(scrapes: Sequence[Scrape], key: str):
    values = [s.evidence.get(key) for s in scrapes]
    present = [v for v in values if v is not None]
    if not present:
        return None
    if isinstance(present[0], dict):
        # Nested evidence (a disk, the PCIe link): the last one's labels, each number's mean.
        last = present[-1]
        return {k: (_mean([p.get(k) for p in present if isinstance(p.get(k), (int, float))])
                    if isinstance(v, (int, float)) else v) for k, v in last.items()}
    return _mean(present)


@dataclass
class Settled:
    """The phase's verdict over its settled part."""

    verdict: str | None
    #: share of the settled reads that named ``verdict``
    held: float
    verdicts: list[str | None]
    waits: dict[str, float]
    evidence: dict[str, object] = field(default_factory=dict)


def counter_rate(points: Sequence[tuple[float, float]]) -> float | None:
    """Rate of a counter the exporter refreshes only on its slow tier, from (time, value)
    reads taken more often: measured between the first and the last read that saw a new
    value, so the span is whole refresh intervals; over the whole span when it changed less
    than twice."""
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    changes = [p for prev, p in zip(points, points[1:]) if p[1] != prev[1]]
    if len(changes) >= 2 and changes[-1][0] > changes[0][0]:
        return (changes[-1][1] - changes[0][1]) / (changes[-1][0] - changes[0][0])
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def settle(scrapes: Sequence[Scrape], earlier: Sequence[Scrape] = ()) -> Settled:
    """The verdict most of the settled reads named (the latest of those tied) and each wait
    and evidence number averaged over them; the owner's CPU cores from its CPU-seconds
    counter over ``earlier`` reads (taken while the window filled) and the settled ones."""
    verdicts = [s.verdict for s in scrapes]
    counts = Counter(v for v in verdicts if v is not None)
    if counts:
        top = max(counts.values())
        verdict = next(v for v in reversed(verdicts) if counts.get(v) == top)
        held = top / len(verdicts)
    else:
        verdict, held = None, 0.0
    causes = sorted({c for s in scrapes for c in s.waits})
    waits = {c: _mean([s.waits.get(c) for s in scrapes]) for c in causes}
    evidence = {k: _mean_evidence(scrapes, k) for k in EVIDENCE if k != "owner_cores"}
    evidence["owner_cores"] = counter_rate([(s.t, s.owner_cpu_seconds) for s in (*earlier, *scrapes)
                                            if s.owner_cpu_seconds is not None])
    evidence["gpu_processes"] = _mean([s.owner_processes for s in scrapes])
    return Settled(verdict, held, verdicts, {c: w for c, w in waits.items() if w is not None},
                   {k: evidence.get(k) for k in (*EVIDENCE, "gpu_processes")})


def measured(before: tuple[float, dict[str, float]] | None, after: tuple[float, dict[str, float]] | None,
             cpu_before: float | None, cpu_after: float | None) -> dict[str, float]:
    """What the workload itself measured over the settled part: each ``*_seconds`` counter as a
    share of wall time (``*_share``), every other counter per second (``*_per_second``), and
    the CPU cores its process tree used."""
    if before is None or after is None or after[0] <= before[0]:
        return {}
    wall = after[0] - before[0]
    out: dict[str, float] = {"seconds": wall}
    for key in sorted(after[1]):
        delta = after[1][key] - before[1].get(key, 0.0)
        if key.endswith("_seconds"):
            out[key.removesuffix("_seconds") + "_share"] = delta / wall
        else:
            out[key + "_per_second"] = delta / wall
    if "copied_bytes" in after[1] and "copy_seconds" in after[1]:
        copy_time = after[1]["copy_seconds"] - before[1].get("copy_seconds", 0.0)
        if copy_time > 0:
            out["copy_bytes_per_second"] = (after[1]["copied_bytes"] - before[1].get("copied_bytes", 0.0)) / copy_time
    if cpu_before is not None and cpu_after is not None:
        out["cores"] = (cpu_after - cpu_before) / wall
    return out


@dataclass
class Replayed:
    verdict: str | None
    waits: dict[str, float]
    #: the diagnosis's lines for "waiting on what?": the evidence the verdict rests on
    evidence: list[str]
    error: str | None = None


def replayed(diagnosis_json: str, key: GpuKey | None, uuid: str | None, index: int) -> Replayed:
    """The GPU's verdict and evidence in ``gpuwait diagnose --json`` output (docs/diagnose.md)."""
    try:
        report = json.loads(diagnosis_json)
        gpus = report["gpus"]
    except (ValueError, KeyError, TypeError) as e:
        return Replayed(None, {}, [], f"not a diagnosis: {e}")
    want = normal_uuid(key.uuid if key else uuid)
    found = [g for g in gpus if (normal_uuid(g.get("uuid")) == want if want else g.get("gpu") == str(index))]
    if not found:
        return Replayed(None, {}, [], "the GPU is not in the replayed trace's diagnosis")
    g = found[0]
    steps = g.get("steps") or []
    lines = []
    for step in steps:
        if step.get("question", "").startswith(("Computing", "Waiting")):
            lines.extend(step.get("evidence") or [])
    return Replayed(g.get("verdict"), dict(g.get("waits") or {}), lines)
