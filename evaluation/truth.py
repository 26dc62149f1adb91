"""The ground truth of a scenario: per GPU the expected verdict with its argument and
citations, and the physics of each scored window, measured on the model itself (not on the
trace): where each GPU's time went, how long kernels were resident, the share of driver
samples below 5 %, SM activity, and what the job's feeder threads were doing."""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluation.model.jobs import InferenceServer, TrainingJob
from evaluation.sources import CITATIONS, cite

VERDICTS = ("data_pipeline", "storage", "host_transfer", "network", "sync", "insufficient_work", "throttled", "none")
WINDOW = 60.0
#: a driver sample below this is an idle one (the exporter's own default is not used here:
#: 5 % is the conventional "the GPU did essentially nothing" mark)
IDLE_SAMPLE = 0.05
#: the share of a second by which a GPU's waiting (or its time at reduced clocks) must exceed
#: the healthy window's before it counts as affected: a twentieth, a third of the least idle
#: share an operator would act on, so an impact is found early rather than late
IMPACT_SHARE = 0.05


@dataclass
class GpuTruth:
    expected: str
    reason: str
    cites: list[str]
    #: the job's collective never completes (a hang): no verdict names it, a detector should
    collective_stalled: bool = False

    def __post_init__(self) -> None:
        for v in self.expected.split("|"):
            if v not in VERDICTS:
                raise ValueError(f"unknown verdict {v!r}")
        cite(*self.cites)
        if not self.reason.strip():
            raise ValueError("a truth needs its argument")


def accepted(expected: str, verdict: str) -> bool:
    return verdict in expected.split("|")


@dataclass
class Window:
    name: str
    start: float
    end: float
    busy: dict[int, float] = field(default_factory=dict)
    sm: dict[int, float] = field(default_factory=dict)
    throttled: dict[int, float] = field(default_factory=dict)
    samples: dict[int, list[float]] = field(default_factory=dict)
    phase_start: dict[int, dict[str, float]] = field(default_factory=dict)
    phase_end: dict[int, dict[str, float]] = field(default_factory=dict)
    feeders: dict[str, dict[str, float]] = field(default_factory=dict)
    cgroups_start: dict[str, dict] = field(default_factory=dict)
    cgroups_end: dict[str, dict] = field(default_factory=dict)


class Meter:
    """Watches the model during the scored windows, and after an onset second by second."""

    def __init__(self, node, windows: list[tuple[str, float, float]], onset: float | None = None) -> None:
        self.node = node
        self.windows = [Window(n, s, e) for n, s, e in windows]
        self.onset = onset
        #: per GPU, at the onset and each whole second after it: (its owner's time per phase,
        #: the GPU's time busy at reduced clocks), both cumulative
        self.seconds: dict[int, list[tuple[dict[str, float], float]]] = {g.index: [] for g in node.gpus}
        self._reduced = {g.index: 0.0 for g in node.gpus}
        self.owner_of: dict[int, object] = {}
        for job in node.jobs:
            if isinstance(job, TrainingJob):
                for r in job.ranks:
                    self.owner_of[r.gpu.index] = r
            elif isinstance(job, InferenceServer):
                self.owner_of[job.gpu.index] = job
        self._steps = 0
        self._seen = {g.index: 0 for g in node.gpus}

    def _phases(self, gpu_index: int) -> dict[str, float]:
        actor = self.owner_of.get(gpu_index)
        return dict(actor.time) if actor is not None else {}

    def observe(self) -> None:
        """After a model step (node.t is the step's end)."""
        node = self.node
        dt = node.dt
        t_end = node.t
        t_start = t_end - dt
        self._steps += 1
        fresh = {}
        #: busy time at reduced clocks this step, per GPU
        reduced = {}
        for g in node.gpus:
            fresh[g.index] = g.samples_since(self._seen[g.index])
            self._seen[g.index] = g.sample_count
            reduced[g.index] = g.step_busy if g.step_busy > 0 and g.clock_factor < 0.995 else 0.0
            self._reduced[g.index] += reduced[g.index]
        if self.onset is not None and t_end > self.onset - dt / 2:
            k = round(t_end - self.onset)
            if abs(t_end - (self.onset + k)) < dt / 2:
                for g in node.gpus:
                    self.seconds[g.index].append((self._phases(g.index), self._reduced[g.index]))
        for w in self.windows:
            if abs(t_end - w.start) < dt / 2:
                w.phase_start = {g.index: self._phases(g.index) for g in node.gpus}
                w.cgroups_start = self._cgroups()
                continue
            if t_start < w.start - dt / 2 or t_end > w.end + dt / 2:
                continue
            for g in node.gpus:
                w.busy[g.index] = w.busy.get(g.index, 0.0) + g.step_busy
                w.sm[g.index] = w.sm.get(g.index, 0.0) + g.step_sm
                w.throttled[g.index] = w.throttled.get(g.index, 0.0) + reduced[g.index]
                w.samples.setdefault(g.index, []).extend(s[1] for s in fresh[g.index] if s[0] >= w.start)
            if abs(t_end - w.end) < dt / 2:
                w.phase_end = {g.index: self._phases(g.index) for g in node.gpus}
                w.cgroups_end = self._cgroups()
            if self._steps % 5 == 0:
                self._feeders(w)

    def _cgroups(self) -> dict[str, dict]:
        node = self.node
        out = {"host": {"stall": dict(node.root.stall), "busy": [node.cpu.modes["user"][c] + node.cpu.modes["system"][c]
                                                                 + node.cpu.modes["softirq"][c] for c in range(node.cpu.n)]}}
        for o in node.owners:
            if not o.gpu_processes:
                continue
            g = o.cgroup
            out[o.id] = {"usage": g.usage, "periods": g.nr_periods, "throttled": g.nr_throttled,
                         "throttled_seconds": g.throttled_seconds, "stall": dict(g.stall), "quota": g.quota_cores,
                         "io": {k: list(v) for k, v in g.io.items()}}
        return out

    def cgroups(self, w: Window) -> dict[str, dict]:
        """What the window's host and owner counters say, as rates: the evidence a reader of
        the trace can see (the owner cgroups where the format has owner_cgroup)."""
        span = w.end - w.start
        a, b = w.cgroups_start, w.cgroups_end
        if not a or not b:
            return {}
        busy = [(y - x) / span for x, y in zip(a["host"]["busy"], b["host"]["busy"])]
        out = {"host": {
            "cpu_pressure_some": round((b["host"]["stall"][("cpu", "some")] - a["host"]["stall"][("cpu", "some")]) / span, 4),
            "io_pressure_some": round((b["host"]["stall"][("io", "some")] - a["host"]["stall"][("io", "some")]) / span, 4),
            "io_pressure_full": round((b["host"]["stall"][("io", "full")] - a["host"]["stall"][("io", "full")]) / span, 4),
            "busy_cores": round(sum(busy), 2), "saturated_cores": sum(1 for x in busy if x >= 0.9)}}
        for owner, end in b.items():
            if owner == "host" or owner not in a:
                continue
            start = a[owner]
            periods = end["periods"] - start["periods"]
            read_bytes = sum(v[0] for v in end["io"].values()) - sum(v[0] for v in start["io"].values())
            out[owner] = {
                "cpu_quota_cores": end["quota"],
                "cpu_usage_cores": round((end["usage"] - start["usage"]) / span, 3),
                "throttled_period_share": round((end["throttled"] - start["throttled"]) / periods, 4) if periods else 0.0,
                "cpu_pressure_some": round((end["stall"][("cpu", "some")] - start["stall"][("cpu", "some")]) / span, 4),
                "io_pressure_some": round((end["stall"][("io", "some")] - start["stall"][("io", "some")]) / span, 4),
                "read_bytes_per_second": round(read_bytes / span),
            }
        return out

    def _feeders(self, w: Window) -> None:
        for o in self.node.owners:
            workers = [th for p in o.processes() for th in p.threads if th.name.startswith("worker")]
            if not workers:
                workers = [th for p in o.gpu_processes for th in p.threads if th.name.startswith("rank")]
            if not workers:
                continue
            cell = w.feeders.setdefault(o.id, {})
            for th in workers:
                if th.state == "R":
                    if th.got > 0 and th.got >= th.want * self.node.dt * 0.99:
                        key = "running"
                    elif th.eff < th.want - 1e-9:
                        key = "throttled"
                    else:
                        key = "waiting_for_core"
                elif th.state == "D":
                    key = "io_wait" if th.iowait else "rpc_wait"
                else:
                    key = "sleeping"
                cell[key] = cell.get(key, 0.0) + 1

    def physics(self, w: Window, gpu_index: int) -> dict:
        span = w.end - w.start
        start, end = w.phase_start.get(gpu_index, {}), w.phase_end.get(gpu_index, {})
        budget = {k: round((end.get(k, 0.0) - start.get(k, 0.0)) / span, 4) for k in sorted(set(end) | set(start))}
        budget = {k: v for k, v in budget.items() if v > 0.0005}
        if not budget:
            budget = {"no_process": 1.0}
        samples = w.samples.get(gpu_index, [])
        return {
            "time_budget": budget,
            "kernel_residency": round(w.busy.get(gpu_index, 0.0) / span, 4),
            "idle_sample_share": round(sum(1 for s in samples if s < IDLE_SAMPLE) / len(samples), 4) if samples else None,
            "sm_active": round(w.sm.get(gpu_index, 0.0) / span, 4),
            "clock_reduced_share": round(w.throttled.get(gpu_index, 0.0) / span, 4),
        }

    def impact(self, gpu_index: int, before: dict, after: dict) -> float | None:
        """Seconds from the onset to the first second in which the GPU is affected: its owner
        waits in the phases that take more of its time after the onset than before it (the
        two windows' time budgets), or the GPU computes at reduced clocks, for IMPACT_SHARE of
        the second more than in the window before the onset. A mechanism is not felt by the
        GPU at once where something buffers it (batches a data loader has already prepared, a
        temperature that takes time to rise): the verdict, which names what the GPU waits
        for, can only follow from then on. 0 where the model shows no such phase (the
        mechanism is felt at once); None when the GPU is never affected."""
        b, a = before["time_budget"], after["time_budget"]
        growing = [p for p, share in a.items() if p not in ("compute", "no_process") and share > b.get(p, 0.0)]
        waited_before = sum(b.get(p, 0.0) for p in growing)
        reduced_before = before["clock_reduced_share"]
        reduced_grows = after["clock_reduced_share"] > reduced_before
        if not growing and not reduced_grows:
            return 0.0
        marks = self.seconds[gpu_index]
        for k in range(len(marks) - 1):
            (p0, r0), (p1, r1) = marks[k], marks[k + 1]
            waited = sum(p1.get(p, 0.0) - p0.get(p, 0.0) for p in growing)
            if growing and waited - waited_before >= IMPACT_SHARE:
                return float(k)
            if reduced_grows and (r1 - r0) - reduced_before >= IMPACT_SHARE:
                return float(k)
        return None

    def feeders(self, w: Window) -> dict[str, dict[str, float]]:
        out = {}
        for owner, cell in w.feeders.items():
            total = sum(cell.values()) or 1.0
            out[owner] = {k: round(v / total, 4) for k, v in sorted(cell.items())}
        return out


def citations(keys: list[str]) -> list[str]:
    return [f"[{k}] {CITATIONS[k]}" for k in keys]
