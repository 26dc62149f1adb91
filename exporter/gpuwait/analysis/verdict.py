"""The verdict: what each GPU waited for (A14), from every source's sub-second samples lined up
on the GPU's own sampling grid.

Every instant of the grid gets, per GPU: the share of it the GPU had no work on (fractional:
analysis.activity), and the strength of each cause's evidence at that instant, one module of
``analysis.evidence`` per cause, scoped to the GPU's owner where the kernel offers it. The
idle share goes to the strongest cause (analysis.attribution). A GPU with no process has
nothing to wait for; an owner that neither computes, uses CPU, waits on IO nor reports work
has no demand (A1).

The verdict is judged twice per pass over the same instants: over the whole window (the
long window, which confirms and retracts) and over its last verdict.short-window seconds,
which raises a new cause within seconds of its onset when that cause dominates the recent
idle time. A change is published only once two consecutive passes agree on it, so a single
pass's noise does not flap the verdict (analysis.verdict.Hysteresis).
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuwait.analysis.activity import GpuActivity, gpu_activity
from gpuwait.analysis.attribution import DIRECT, HOST, PAUSE, Attribution, VerdictRules, attribute, verdict
from gpuwait.analysis.collectives import join_ranks_to_gpus, nearest_nics
from gpuwait.analysis.evidence import collectives as nccl_timing
from gpuwait.analysis.evidence import workload
from gpuwait.analysis.evidence.checkpoint import checkpoint
from gpuwait.analysis.evidence.data_pipeline import DataPipeline
from gpuwait.analysis.evidence.data_pipeline import throttled as cpu_throttled
from gpuwait.analysis.evidence.host_transfer import copy_share, host_copies, host_transfer, input_copy_share
from gpuwait.analysis.evidence.network import MIN_PEAK, LinkAlignment, Network
from gpuwait.analysis.evidence.storage import OWNER_READ_BYTES, storage
from gpuwait.analysis.evidence.sync import quiet_wait, sync
from gpuwait.analysis.evidence.throttled import throttled
from gpuwait.analysis.stall import collective_stalled, stall_start
from gpuwait.analysis.timeseries import HOLD_INTERVALS, Grid, dominant_period
from gpuwait.collectors.gpu import window as gpu_window
from gpuwait.collectors.nccl import window as nccl_window
from gpuwait.collectors.gpu.payload import GpuDevice
from gpuwait.core.config import MIN_INTERVAL, Option, Settings, parse_duration, parse_fraction, parse_positive
from gpuwait.core.facts import EVIDENCE_ORDER
from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.series import window_rate

INTERVAL = Option("verdict.interval", parse_duration, 2.0,
                  "How often the verdict is recomputed over the window (it is the costliest analysis; the window statistics of each source are refreshed every analysis.interval).",
                  minimum=MIN_INTERVAL)
SHORT_WINDOW = Option("verdict.short-window", parse_duration, 15.0,
                      "The recent part of the window over which a new cause can be raised before the whole window confirms it.")
MIN_IDLE_RATIO = Option("verdict.min-idle-ratio", parse_fraction, 0.15,
                        "Idle fraction of the window below which a GPU counts as computing, whatever it waited for.")
MIN_CAUSE_SHARE = Option("verdict.min-cause-share", parse_fraction, 0.3,
                         "Share of the idle time a cause must explain to be named the verdict.")
MIN_THROTTLED_SHARE = Option("verdict.min-throttled-share", parse_fraction, 0.3,
                             "Share of busy samples under power or thermal clock limits that makes a busy GPU 'throttled'.")
DEMAND_OWNER_CORES = Option("verdict.demand.owner-cores", parse_positive, 0.05,
                            "CPU cores the GPU's owner must use, unless its threads wait on IO, for it to count as active (demand, A1).")
DEMAND_IDLE_CORES = Option("verdict.demand.idle-cores", parse_positive, 0.2,
                           "CPU cores per idle GPU its owner must use, beyond spin-waiting on its own running kernels, "
                           "for the GPU's unexplained idle time to count as too little work rather than no demand (A1, A4, A13).")
DIP_MIN_PERIODICITY = Option("verdict.dip.min-periodicity", parse_fraction, 0.3,
                             "How cleanly dips must repeat (autocorrelation at the period) for their period to be published.")

#: An owner whose CPU covers less than this share of its kernels' running time does not
#: spin through them (analysis.verdict._demand): a spinning owner's CPU rate matches its
#: GPUs' busy share to within what measuring them over slightly different spans allows.
SPIN_COVERAGE = 0.9
#: A raised cause must explain this share of the short window's idle time: it is the one
#: thing the GPU has waited for lately, not one of several.
SHORT_DOMINANCE = 0.6

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
    #: Seconds the published verdict has held, at this pass.
    verdict_seconds: float = 0.0
    #: Whether the GPU sat in a collective that did not end (analysis.stall); None: cannot tell.
    collective_stalled: bool | None = None


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    gpus: tuple[GpuVerdict, ...]
    verdict: str
    #: cause -> summed idle share over the node's GPUs (sums to their total idle share)
    wait_ratio: dict[str, float] = field(default_factory=dict)


class Hysteresis:
    """The published verdict of each GPU across passes: a change is published when two
    consecutive passes agree on it; the time it was published is kept for its age."""

    def __init__(self) -> None:
        self.published: dict[str, tuple[str, float]] = {}
        self.pending: dict[str, str] = {}
        self.last_end: float | None = None

    def restart_if_discontinuous(self, end: float, interval: float) -> None:
        # Passes that do not follow each other (a new replay, a clock that went back) share nothing.
        if self.last_end is not None and not 0 < end - self.last_end <= 3 * interval + 1e-6:
            self.published.clear()
            self.pending.clear()
        self.last_end = end

    def publish(self, uuid: str, wanted: str, end: float) -> tuple[str, float]:
        current = self.published.get(uuid)
        if current is None:
            self.published[uuid] = (wanted, end)
            self.pending.pop(uuid, None)
            return wanted, 0.0
        cause, since = current
        if wanted == cause:
            self.pending.pop(uuid, None)
        elif self.pending.get(uuid) == wanted:
            self.published[uuid] = (wanted, end)
            self.pending.pop(uuid, None)
            return wanted, 0.0
        else:
            self.pending[uuid] = wanted
        return cause, end - since


class VerdictAnalyser:
    """Callable as a collector's ``analyse``: a function of the sampler's windows and of the
    verdicts it published at the previous passes."""

    def __init__(self) -> None:
        self.hysteresis = Hysteresis()

    def __call__(self, inputs: AnalysisInputs, settings: Settings) -> NodeVerdict:
        gpu_view = inputs.views.get("gpu")
        if gpu_view is None or not gpu_view.times:
            return NodeVerdict((), "none")
        self.hysteresis.restart_if_discontinuous(inputs.end, settings[INTERVAL])
        start = inputs.end - settings.analysis_window
        first = next((i for i, t in enumerate(gpu_view.times) if t >= start), len(gpu_view.times))
        grid = Grid(gpu_view.times[first:], settings.sample_interval)
        if len(grid.times) < 3:
            return NodeVerdict((), "none")
        n = len(grid.times)
        short_start = next((i for i, t in enumerate(grid.times) if t >= inputs.end - settings[SHORT_WINDOW]), n)
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
        scope = _OwnerScope(inputs, grid, settings)
        host_quiet = network.quiet()
        host_links = network.moving()
        device_reading = inputs.latest.get("gpu_device")
        nccl_view, rdma_data = inputs.views.get("nccl"), getattr(inputs.latest.get("rdma"), "data", None)
        collectives = join_ranks_to_gpus(nccl_view, getattr(device_reading, "data", None), rdma_data, at=inputs.end).gpus
        recent = join_ranks_to_gpus(nccl_window.since(nccl_view, inputs.end - settings[SHORT_WINDOW]),
                                    getattr(device_reading, "data", None), rdma_data, at=inputs.end).gpus
        late: dict[str, bool] = {}

        activity = {g: gpu_activity(gpu_view, grid, g, settings) for g in gpus}
        demand_of = _demand(owners, owner_of, activity, device, grid, settings, _latest_interval(inputs))
        spinning = _spinning(owner_of, activity, device, gpu_view, grid, pipeline, host_links)
        rules = VerdictRules(settings[MIN_IDLE_RATIO], settings[MIN_CAUSE_SHARE], settings[MIN_THROTTLED_SHARE])
        results = []
        for g in gpus:
            index, uuid = g
            info = device.get(uuid)
            owner = owner_of[g]
            act = activity[g]
            # No process on the GPU: nothing runs there that could be waiting (A1). Its links and
            # dips are still measured, for the dashboards.
            processless = info is not None and info.processes == () and not info.owners
            owned = _Owned.of(scope, owner, owners[owner].cores if owner in owners else math.nan)
            waiting = [max(x, f) if x == x else x for x, f in zip(act.idle, act.footprint)]
            links = network.alignment(act.activity, waiting)
            timing = collectives.get(uuid)
            # NCCL's own timing of the GPU's collectives outranks the host's inference about them.
            timed = nccl_timing.timed(timing, recent.get(uuid), act, network.port_rates(nearest_nics(info)) if info else [],
                                      short_start, sync(g, owner, activity, owner_of), settings[MIN_PEAK])
            peer_sync, timed_network = timed.sync, timed.network
            if timed.straggler is not None:
                late[uuid] = timed.straggler
            # The GPU's own signs of waiting in a collective, which need no peer on this node.
            own_sync = quiet_wait(gpu_view, grid, g, info, act, host_quiet)
            stalled = collective_stalled(gpu_view, grid, g, info, timing, settings)
            first = stall_start(grid, settings) if stalled else n
            if stalled:
                # Its ranks wait in a collective a peer does not join (A12): the resident kernel
                # is the wait itself, whatever share of the SMs it holds.
                own_sync = [DIRECT if i >= first else v for i, v in enumerate(own_sync)]
            sync_at = _strongest(peer_sync, own_sync)
            host_evidence: dict[str, Sequence[float]] = {
                "storage": owned.scoped(host_storage),
                "data_pipeline": _strongest(
                    _strongest(pipeline.evidence(owned.cores, spinning.get(owner)),
                               pipeline.refused(owned.cores, owned.runnable) if owned.known else None),
                    cpu_throttled(inputs, grid, owner, settings)),
                # Rates are measured over intervals whose edges cut a copy: an instant beside
                # one is concurrent with it.
                "host_transfer": _widened([DIRECT if a or b else 0.0 for a, b in zip(
                    host_transfer(gpu_view, grid, g, info, settings),
                    host_copies(gpu_view, grid, g, info, [x - r if x == x else x for x, r in zip(act.idle, act.resident)],
                                host_links))]),
                "sync": sync_at,
                PAUSE: owned.writes(host_checkpoint),
            }
            cores, blocked = owners.get(owner, (0.0, 0.0))
            owner_active = owner != "" and (blocked >= 1 or demand_of.get(owner, cores >= settings[DEMAND_OWNER_CORES]))
            report = None if processless else workload.reported(inputs.stats, owner)

            def judged(links: list[tuple[LinkAlignment, list[bool]]]
                       ) -> tuple[list[float], list[float], dict[str, Sequence[float]], bool]:
                """Each instant's idle share and the part of it a kernel was resident for, each
                cause's evidence and the owner's demand, with the network evidence of ``links``."""
                # Rates are measured over sampling intervals whose edges cut a copy or a burst:
                # an instant within one interval of the traffic is concurrent with it.
                network_at = _strongest(_widened([DIRECT if b else 0.0 for b in network.evidence(links)]), timed_network)
                # A resident collective's instant is a wait only where the network or a peer
                # explains it; that wait is inside a kernel, so only they explain it (attribution).
                idle, resident = [], []
                for i, (x, f, r) in enumerate(zip(act.idle, act.footprint, act.resident)):
                    if i >= first:
                        idle.append(1.0)
                        resident.append(1.0)
                    elif f > 0.0 and (network_at[i] or sync_at[i]):
                        idle.append(max(x, f))
                        resident.append(max(r, f))
                    else:
                        idle.append(x)
                        resident.append(r)
                evidence: dict[str, Sequence[float]] = {**host_evidence, "network": network_at}
                active = owner_active
                if processless:
                    return idle, resident, {}, False
                if report is not None:
                    # The loop's own account outranks what the host suggests (A8, A13).
                    active = workload.demand(report, settings)
                    kernel_free = [x - r if x == x else x for x, r in zip(idle, resident)]
                    evidence = workload.with_data_wait(evidence, kernel_free, report, settings)
                    no_request = workload.between_requests(kernel_free, report)
                    if no_request is not None:
                        evidence[PAUSE] = _strongest(no_request, evidence.get(PAUSE))
                if not active:
                    if report is not None:
                        # The loop itself reports too little to do (A1, A13): nothing to wait for.
                        evidence = {}
                    else:
                        # Seen from the host only, a quiet owner may still be waiting: a job asleep
                        # in a socket read during an all-reduce uses no CPU. Its own evidence stands
                        # (owner-scoped, so another tenant's load is not it), and so does the GPU's
                        # own collective waiting (a resident kernel is work); only a busy peer
                        # proves nothing, as inference GPUs each serve alone.
                        evidence["sync"] = own_sync
                return idle, resident, evidence, active

            reasons = throttled(gpu_view, grid, g)
            copying = None if processless else input_copy_share(gpu_view, grid, g, info, host_links)
            idle, resident, evidence, active = judged(links)
            long = attribute(idle, evidence, [active] * n, reasons, resident=resident, copying=copying)
            # The short window is judged on its own instants' link levels (Network.alignment).
            idle, resident, evidence, _ = judged(network.alignment(act.activity, waiting, start=short_start))
            short = attribute(idle, evidence, [active] * n, reasons, start=short_start, resident=resident,
                              copying=copying)
            cause = _raised(verdict(long, rules), short, rules)
            period = dominant_period(act.activity, grid.step) if long.idle_ratio >= rules.min_idle_ratio else None
            if period is not None and period[1] < settings[DIP_MIN_PERIODICITY]:
                period = None
            results.append(self._published(GpuVerdict(
                # A GPU that waits on something has work waiting, however quiet its owner's CPU.
                index=str(index), uuid=uuid, owner=owner, demand=active or (cause in EVIDENCE_ORDER and not processless),
                verdict=cause, attribution=long,
                dip_period_seconds=period[0] if period else None, dip_strength=period[1] if period else None,
                links=tuple(a for a, _ in links), busy_signal=act.signal,
                collective_stalled=stalled,
            ), inputs.end))
        results = _mark_stragglers(results, settings, late)
        return NodeVerdict(tuple(results), _node_verdict(results), _node_waits(results))

    def _published(self, result: GpuVerdict, end: float) -> GpuVerdict:
        cause, age = self.hysteresis.publish(result.uuid, result.verdict, end)
        return replace(result, verdict=cause, verdict_seconds=age)


def _raised(long_verdict: str, short: Attribution, rules: VerdictRules) -> str:
    """The long window's verdict, or a cause that dominates the short window's idle time while
    the long window does not name it yet (an onset; the long window confirms it later).

    Clock limits are raised from the short window as they are: the driver reports them
    itself, per sample, as clock-event reason bits, so a busy GPU held down by them for
    verdict.min-throttled-share of its recent busy time is throttled now, with nothing to
    infer (a power brake or a lowered power cap acts at once and stays)."""
    recent = verdict(short, rules)
    if recent == "throttled":
        return recent
    if recent == long_verdict or recent in ("none", "insufficient_work"):
        return long_verdict
    if short.wait_ratio.get(recent, 0.0) >= SHORT_DOMINANCE * short.idle_ratio:
        return recent
    return long_verdict


def _latest_interval(inputs: AnalysisInputs) -> tuple[float, float] | None:
    """The span of the latest slow-tier interval of the gpu_device source, over which the
    owners' CPU rates (gpu_window.owner_activity) are measured."""
    view = inputs.views.get("gpu_device")
    if view is None or len(view.times) < 2:
        return None
    return view.times[-2], view.times[-1]


def _demand(owners: dict[str, gpu_window.OwnerActivity], owner_of: dict[tuple[str, str], str],
            activity: dict[tuple[str, str], GpuActivity], device: dict[str, GpuDevice], grid: Grid,
            settings: Settings, interval: tuple[float, float] | None = None) -> dict[str, bool]:
    """Whether each owner has work its GPUs wait for (A1), judged over its latest slow-tier
    interval, the one its CPU rate covers (``interval``; the last slow interval of the grid
    when not given).

    An owner with work for an idle GPU is busy while the GPU idles: it decodes, reads or
    launches. Its CPU time alone does not show that: CUDA's default synchronisation spins a
    host thread for as long as the kernel it waits on runs (cudaDeviceScheduleAuto spins
    while there are fewer active contexts than cores), so a server asleep between requests
    still uses about a core per busy GPU. What the owner uses beyond that spin, one core
    per GPU-driving process at most, while each of its GPUs computes, is what it does while
    they idle. Less than verdict.demand.idle-cores per idle GPU (per process, for a process
    that drives several) is threads that sleep
    between requests, not a host side that cannot keep up: the idle time is the load's
    (A1, A13). An owner using less CPU than its kernels ran does not spin through them;
    it, and an owner whose processes are not known, keeps the plain rule
    (verdict.demand.owner-cores)."""
    since, until = interval or (grid.times[-1] - settings.slow_interval, grid.times[-1])
    recent = [i for i, t in enumerate(grid.times) if since <= t <= until] or [len(grid.times) - 1]
    demand = {}
    for owner, members, pids in _owner_groups(owner_of, device):
        use = owners.get(owner)
        if use is None:
            continue
        busy = idle = 0.0
        for g in members:
            # Each GPU's mean over the instants it is known at: an instant without a sample
            # (the window's last, one the driver skipped) is neither busy nor idle.
            known = gpu_busy = gpu_idle = 0.0
            for i in recent:
                x = activity[g].idle[i]
                if x == x:
                    # A host thread spins through a kernel however few SMs it occupies: the
                    # part of an idle instant a kernel was resident for is spun through too.
                    r = activity[g].resident[i]
                    r = r if r == r else 0.0
                    known += 1.0
                    gpu_busy += 1.0 - x + r
                    gpu_idle += x - r
            if known:
                busy += gpu_busy / known
                idle += gpu_idle / known
        spin = min(float(len(pids)), busy)
        if use.cores < SPIN_COVERAGE * spin:
            # Less CPU than its kernels ran: its threads do not spin through them all (they
            # launch asynchronously or block), and what it uses cannot be told apart from
            # its own work.
            continue
        # One thread per process can work on its GPUs' next step: per idle GPU where each
        # process drives one, per process where one drives several.
        idle = min(float(len(pids)), idle)
        demand[owner] = use.cores - spin >= max(settings[DEMAND_OWNER_CORES], settings[DEMAND_IDLE_CORES] * idle)
    return demand


def _owner_groups(owner_of: dict[tuple[str, str], str], device: dict[str, GpuDevice]
                  ) -> list[tuple[str, list[tuple[str, str]], set[int]]]:
    """(owner, its GPUs, the pids of its processes on them) for each owner with processes."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for g, owner in owner_of.items():
        if owner:
            groups.setdefault(owner, []).append(g)
    out = []
    for owner, members in groups.items():
        pids = {p.pid for g in members for p in (getattr(device.get(g[1]), "processes", None) or ())}
        if pids:
            out.append((owner, members, pids))
    return out


def _spinning(owner_of: dict[tuple[str, str], str], activity: dict[tuple[str, str], GpuActivity],
              device: dict[str, GpuDevice], view, grid: Grid, pipeline: DataPipeline,
              host_links: Sequence[float]) -> dict[str, list[float]]:
    """Per owner, how many of its host threads spin through each whole instant on a kernel or
    a copy of its GPUs (DataPipeline.spinning_threads), a copy counted for the share of the
    instant it surely ran (evidence.host_transfer.copy_share)."""
    out = {}
    for owner, members, pids in _owner_groups(owner_of, device):
        busy = []
        for g in members:
            act = activity[g]
            copying = copy_share(view, grid, g, device.get(g[1]), host_links)
            row = []
            for x, r, c in zip(act.idle, act.resident, copying):
                if x != x:
                    row.append(math.nan)
                    continue
                r = r if r == r else 0.0
                free = max(0.0, x - r)
                row.append(1.0 - free + min(free, c))
            busy.append(row)
        out[owner] = pipeline.spinning_threads(busy, len(pids))
    return out


def _widened(values: Sequence[float]) -> list[float]:
    """Each instant's value, or its neighbours' where larger (one sampling interval either side)."""
    v = list(values)
    if len(v) < 2 or not any(v):
        # No evidence anywhere (NaN is true): nothing to widen, as the maxima would find.
        return v
    # max over the same neighbours in the same order as one slice each would, so NaN falls out
    # the same way (max keeps its first argument unless a later one compares greater).
    return [max(v[0], v[1]), *map(max, v, v[1:], v[2:]), max(v[-2], v[-1])]


def _filled(values: Sequence[float], default: float) -> list[float]:
    """Gaps (NaN) filled with the nearest valid value, forwards first; ``default`` when there is none."""
    out = list(values)
    last = math.nan
    for i, v in enumerate(out):
        if v == v:
            last = v
        else:
            out[i] = last
    nxt = default
    for i in range(len(out) - 1, -1, -1):
        if values[i] == values[i]:
            nxt = values[i]
        elif out[i] != out[i]:
            out[i] = nxt
    return out


def _strongest(a: Sequence[float], b: Sequence[float] | None) -> list[float]:
    return list(a) if b is None else [max(x, y) for x, y in zip(a, b)]


class _OwnerScope:
    """The owners' host side on the grid: CPU use, runnable and IO-blocked threads, from the
    slow-tier reads of the GPU source (one every --slow.interval)."""

    def __init__(self, inputs: AnalysisInputs, grid: Grid, settings: Settings) -> None:
        self.view = inputs.views.get("gpu_device")
        self.grid = grid
        self.slow = settings.slow_interval
        self.min_read_rate = settings[OWNER_READ_BYTES]


@dataclass
class _Owned:
    """One owner's evidence scope. ``known`` is False for a GPU whose owner cannot be told
    (processes not readable): host-wide evidence then counts, at host strength."""

    known: bool
    cores: list[float] | None
    runnable: list[float]
    blocked: list[bool]

    @classmethod
    def of(cls, scope: _OwnerScope, owner: str, latest_cores: float = math.nan) -> "_Owned":
        n = len(scope.grid)
        if not owner or scope.view is None:
            return cls(False, None, [float("nan")] * n, [False] * n)
        series = gpu_window.owner_series(scope.view, owner)
        gap = HOLD_INTERVALS * scope.slow
        # The owner's CPU rate is known between slow reads; before the first interval and after
        # the last one, the nearest known rate stands (the latest read is the owner's present).
        cores = _filled(scope.grid.rates(series.cpu_seconds, gap), latest_cores)
        runnable = scope.grid.hold(series.running, gap)
        # A read of the D-state threads is a snapshot every slow interval, and a periodic wait
        # can fall between snapshots for a while: an owner seen waiting on IO at any read of
        # the window is one whose threads wait for reads; one never seen so is not.
        # The snapshots can also all fall outside a short read phase that recurs every step
        # (one of 0.2 s in each 0.6 s step escapes six reads 5 s apart about once in four
        # windows, by aliasing). The bytes the owner's processes read from block devices are
        # a counter, which no read phase escapes: an owner reading from them at a data
        # pipeline's rate is one whose reads the host's storage stall delays.
        seen = any(b == b and b >= 1 for b in series.blocked.values)
        if not seen:
            read_rate = window_rate(series.read_bytes.times, series.read_bytes.values)
            seen = read_rate is not None and read_rate >= scope.min_read_rate
        blocked = [seen] * n
        return cls(True, cores, runnable, blocked)

    def scoped(self, host: Sequence[bool]) -> list[float]:
        """Host-wide IO evidence for this owner: direct when its own threads were seen blocked
        on IO in the window; host strength where the owner is unknown; absent otherwise,
        as the reads are another tenant's (a task that waits for a read sleeps in D state)."""
        if not self.known:
            return [HOST if h else 0.0 for h in host]
        return [DIRECT if h and b else 0.0 for h, b in zip(host, self.blocked)]

    def writes(self, host: Sequence[bool]) -> list[float]:
        """Host-wide write bursts (a checkpoint) for this owner: direct where its threads were
        blocked on IO (writers throttled on dirty pages sleep in D state); host strength
        elsewhere, as buffered writes reach the disk from the kernel's flusher threads, not the
        writer, so a quiet owner may still be the one saving, or another tenant may."""
        return [(DIRECT if b else HOST) if h else 0.0 for h, b in zip(host, self.blocked)]


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


def _mark_stragglers(results: list[GpuVerdict], settings: Settings, late: dict[str, bool] | None = None) -> list[GpuVerdict]:
    """In each owner's group of GPUs, the one the others wait for: it computes the longest
    while its peers' idle time is spent waiting on it (A12). Where NCCL's timing covers the
    group's GPUs (``late``: uuid -> whether it named that GPU the rank the others wait for),
    it names the straggler instead: the rank whose collectives are shortest is the last to
    arrive (analysis.evidence.collectives)."""
    late = late or {}
    groups: dict[str, list[GpuVerdict]] = {}
    for r in results:
        if r.owner:
            groups.setdefault(r.owner, []).append(r)
    stragglers = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        if any(m.uuid in late for m in members):
            stragglers.update(m.uuid for m in members if late.get(m.uuid))
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
    """The node's most common named cause. A GPU waiting at the barrier (sync) waits for
    whatever holds its peer back: where a peer's own wait is named, that is the node's cause,
    and sync only where nothing else is (a straggler that computes longer)."""
    named = [r for r in results if r.verdict != "none"]
    if not named:
        return "none"
    root = [r for r in named if r.verdict != "sync"]
    if root:
        named = root
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

