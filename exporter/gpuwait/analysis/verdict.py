"""The verdict: what each GPU waited for over the window (A14), from every source's sub-second
samples lined up on the GPU's own sampling grid.

For every grid point where a GPU was idle, the evidence present at that instant is collected,
one module of ``analysis.evidence`` per cause: storage (reads in flight with tasks stalled on
IO), data pipeline (a core saturated by the GPU's owner), host transfer (PCIe near its link's
capacity), sync (a peer GPU of the same owner still computing), network (a link whose bursts
line up with the GPU's dips), and a checkpoint being written; the idle sample is given to one
cause (analysis.attribution). The shares, the primary cause, the period of the dips, each
link's alignment with them and the straggler of each owner are the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuwait.analysis.attribution import Attribution, VerdictRules, attribute, verdict
from gpuwait.analysis.evidence import workload
from gpuwait.analysis.evidence.checkpoint import checkpoint
from gpuwait.analysis.evidence.data_pipeline import DataPipeline
from gpuwait.analysis.evidence.host_transfer import host_transfer
from gpuwait.analysis.evidence.network import LinkAlignment, Network
from gpuwait.analysis.evidence.storage import storage
from gpuwait.analysis.evidence.sync import sync
from gpuwait.analysis.evidence.throttled import throttled
from gpuwait.analysis.timeseries import HOLD_INTERVALS, Grid, dominant_period
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.config import Option, Settings, parse_duration, parse_fraction, parse_positive
from gpuwait.core.facts import EVIDENCE_ORDER
from gpuwait.core.plugin import AnalysisInputs

INTERVAL = Option("verdict.interval", parse_duration, 5.0,
                  "How often the verdict is recomputed over the window (it is the costliest analysis; the window statistics of each source are refreshed every analysis.interval).")
MIN_IDLE_RATIO = Option("verdict.min-idle-ratio", parse_fraction, 0.15,
                        "Idle fraction of the window below which a GPU counts as computing, whatever it waited for.")
MIN_CAUSE_SHARE = Option("verdict.min-cause-share", parse_fraction, 0.3,
                         "Share of the idle time a cause must explain to be named the verdict.")
MIN_THROTTLED_SHARE = Option("verdict.min-throttled-share", parse_fraction, 0.3,
                             "Share of busy samples under power or thermal clock limits that makes a busy GPU 'throttled'.")
SM_IDLE_THRESHOLD = Option("verdict.sm-idle-threshold", parse_fraction, 0.1,
                           "SM activity (GPM) below which a GPU counts as idle; GPM sees through NCCL kernels that keep utilization at 100% while waiting.")
DEMAND_OWNER_CORES = Option("verdict.demand.owner-cores", parse_positive, 0.05,
                            "CPU cores the GPU's owner must use, unless its threads wait on IO, for it to count as active (demand, A1).")
DIP_MIN_PERIODICITY = Option("verdict.dip.min-periodicity", parse_fraction, 0.3,
                             "How cleanly dips must repeat (autocorrelation at the period) for their period to be published.")

__all__ = ["GpuVerdict", "LinkAlignment", "NodeVerdict", "VerdictAnalyser"]


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    index: str
    uuid: str
    owner: str
    demand: bool
    verdict: str
    attribution: Attribution
    dip_period_seconds: float | None = None
    dip_strength: float | None = None
    links: tuple[LinkAlignment, ...] = ()
    straggler: bool = False
    #: The signal the idle samples were judged on: "sm_active" (GPM) or "utilization".
    busy_signal: str = "utilization"


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    gpus: tuple[GpuVerdict, ...]
    verdict: str
    #: cause -> summed idle share over the node's GPUs (sums to their total idle share)
    wait_ratio: dict[str, float] = field(default_factory=dict)


class VerdictAnalyser:
    """Callable as a collector's ``analyse``: a pure function of the sampler's windows."""

    def __call__(self, inputs: AnalysisInputs, settings: Settings) -> NodeVerdict:
        gpu_view = inputs.views.get("gpu")
        if gpu_view is None or not gpu_view.times:
            return NodeVerdict((), "none")
        start = inputs.end - settings.analysis_window
        first = next((i for i, t in enumerate(gpu_view.times) if t >= start), len(gpu_view.times))
        grid = Grid(gpu_view.times[first:], settings.sample_interval)
        if len(grid.times) < 3:
            return NodeVerdict((), "none")
        gpus = gpu_window.gpus(gpu_view)
        device = _devices(inputs)
        owner_of = {g: _primary_owner(device.get(g[1])) for g in gpus}
        owners = _owner_activity(inputs)
        # Host evidence, computed once per pass and shared by all GPUs.
        gap = HOLD_INTERVALS * max(grid.step, settings.sample_interval)
        host_storage = storage(inputs, grid, settings, gap)
        host_checkpoint = checkpoint(inputs, grid, settings, gap)
        pipeline = DataPipeline(inputs, grid, settings, gap)
        network = Network(inputs, grid, settings, gap)

        busy: dict[tuple[str, str], list[float]] = {}
        signal: dict[tuple[str, str], str] = {}
        for g in gpus:
            sm = grid.hold(gpu_window.sm_active(gpu_view, g))
            if any(v == v for v in sm):
                busy[g], signal[g] = sm, "sm_active"
            else:
                busy[g], signal[g] = grid.hold(gpu_window.utilization(gpu_view, g)), "utilization"
        rules = VerdictRules(settings[MIN_IDLE_RATIO], settings[MIN_CAUSE_SHARE], settings[MIN_THROTTLED_SHARE])
        results = []
        n = len(grid.times)
        for g in gpus:
            index, uuid = g
            info = device.get(uuid)
            owner = owner_of[g]
            threshold = settings[SM_IDLE_THRESHOLD] if signal[g] == "sm_active" else settings[gpu_window.IDLE_THRESHOLD]
            evidence: dict[str, Sequence[bool]] = {
                "storage": host_storage,
                "data_pipeline": pipeline.evidence(owners.get(owner, (None, 0.0))[0] if owner else None, owner != ""),
                "host_transfer": host_transfer(gpu_view, grid, g, info, settings),
                "sync": sync(g, owner, busy, owner_of, settings, n),
            }
            links = network.alignment(busy[g])
            evidence["network"] = network.evidence(links)
            evidence["checkpoint"] = host_checkpoint
            cores, blocked = owners.get(owner, (0.0, 0.0))
            active = owner != "" and (cores >= settings[DEMAND_OWNER_CORES] or blocked >= 1)
            report = workload.reported(inputs.stats, owner)
            if report is not None:
                # The loop's own account outranks what the host suggests (A8, A13).
                active = workload.demand(report, settings)
                evidence = workload.with_data_wait(evidence, busy[g], threshold, report, settings)
            if not active:
                if report is not None:
                    # The loop itself reports too little to do (A1, A13): nothing to wait for.
                    evidence = {}
                else:
                    # Seen from the host only, a quiet owner may still be waiting: a job asleep
                    # in a socket read during an all-reduce uses no CPU. Host evidence stands;
                    # only a busy peer proves nothing, as inference GPUs each serve alone.
                    evidence.pop("sync", None)
            attribution = attribute(busy[g], evidence, [active] * n, throttled(gpu_view, grid, g), threshold)
            period = dominant_period(busy[g], grid.step) if attribution.idle_ratio >= rules.min_idle_ratio else None
            if period is not None and period[1] < settings[DIP_MIN_PERIODICITY]:
                period = None
            cause = verdict(attribution, rules)
            results.append(GpuVerdict(
                # A GPU that waits on something has work waiting, however quiet its owner's CPU.
                index=str(index), uuid=uuid, owner=owner, demand=active or cause in EVIDENCE_ORDER,
                verdict=cause, attribution=attribution,
                dip_period_seconds=period[0] if period else None, dip_strength=period[1] if period else None,
                links=tuple(a for a, _ in links), busy_signal=signal[g],
            ))
        results = _mark_stragglers(results, busy, settings)
        return NodeVerdict(tuple(results), _node_verdict(results), _node_waits(results))


def _devices(inputs: AnalysisInputs) -> dict[str, GpuDevice]:
    reading = inputs.latest.get("gpu_device")
    if reading is None:
        return {}
    return {d.uuid: d for d in getattr(reading.data, "gpus", ())}


def _owner_activity(inputs: AnalysisInputs) -> dict[str, gpu_window.OwnerActivity]:
    view = inputs.views.get("gpu_device")
    return gpu_window.owner_activity(view) if view is not None else {}


def _primary_owner(info: GpuDevice | None) -> str:
    """The owner with the most processes on the GPU ("" when unknown or none)."""
    uses = getattr(info, "owners", ()) or ()
    if not uses:
        return ""
    return max(uses, key=lambda u: (u.processes, u.owner)).owner


def _mark_stragglers(results: list[GpuVerdict], busy, settings: Settings) -> list[GpuVerdict]:
    """In each owner's group of GPUs, the one the others wait for: it computes the longest
    while its peers' idle time is spent waiting on it (A12)."""
    groups: dict[str, list[GpuVerdict]] = {}
    for r in results:
        if r.owner:
            groups.setdefault(r.owner, []).append(r)
    stragglers = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        waiting = [m for m in members if m.attribution.wait_ratio.get("sync", 0.0) >= settings[MIN_IDLE_RATIO]]
        if not waiting:
            continue
        slowest = min(members, key=lambda m: (m.attribution.idle_ratio, m.attribution.wait_ratio.get("sync", 0.0)))
        others = [m.attribution.idle_ratio for m in members if m is not slowest]
        if slowest not in waiting and min(others) - slowest.attribution.idle_ratio >= settings[MIN_IDLE_RATIO]:
            stragglers.add(slowest.uuid)
    if not stragglers:
        return results
    return [replace(r, straggler=r.uuid in stragglers) for r in results]


def _node_verdict(results: Sequence[GpuVerdict]) -> str:
    named = [r for r in results if r.verdict != "none"]
    if not named:
        return "none"
    counts: dict[str, tuple[int, float]] = {}
    for r in named:
        c, w = counts.get(r.verdict, (0, 0.0))
        counts[r.verdict] = (c + 1, w + r.attribution.wait_ratio.get(r.verdict, 0.0))
    return max(counts.items(), key=lambda kv: kv[1])[0]


def _node_waits(results: Sequence[GpuVerdict]) -> dict[str, float]:
    waits: dict[str, float] = {}
    for r in results:
        for cause, share in r.attribution.wait_ratio.items():
            waits[cause] = waits.get(cause, 0.0) + share
    return waits

