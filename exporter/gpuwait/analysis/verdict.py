"""The verdict: what each GPU waited for over the window (A14), from every source's sub-second
samples lined up on the GPU's own sampling grid.

For every grid point where a GPU was idle, the evidence present at that instant is collected —
storage (reads in flight with tasks stalled on IO), data pipeline (a core saturated by the
GPU's owner), host transfer (PCIe near its link's capacity), sync (a peer GPU of the same owner
still computing), network (a link whose bursts line up with the GPU's dips) — and the idle
sample is given to one cause (analysis.attribution). The shares, the primary cause, the period
of the dips, each link's alignment with them and the straggler of each owner are the result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuwait.analysis import workload_evidence
from gpuwait.analysis.attribution import EVIDENCE_ORDER, Attribution, VerdictRules, attribute, verdict
from gpuwait.analysis.timeseries import dominant_period, interval_rates_at, pearson, sample_and_hold
from gpuwait.collectors import AnalysisInputs
from gpuwait.config import Option, Settings, parse_duration as _duration, parse_fraction, register_option
from gpuwait.parsers.diskstats import TIME_FIELD_MODULUS_SECONDS
from gpuwait.ring import WindowView
from gpuwait.stats.series import interval_rates

#: Usable bytes per second per lane by PCIe generation (line rate less encoding overhead).
PCIE_LANE_BYTES_PER_SECOND = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.56e9}


def pcie_link_capacity(generation: int | None, width: int | None) -> float | None:
    """Bytes per second one direction of a link carries at its trained generation and width;
    None for a generation or width that is unknown."""
    per_lane = PCIE_LANE_BYTES_PER_SECOND.get(generation or 0)
    if per_lane is None or not width or width <= 0:
        return None
    return per_lane * width


#: Clock-event reasons that mean the GPU is held below the clocks it asked for.
CLOCK_LIMIT_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # power cap, HW slowdown, SW/HW thermal, power brake
#: A grid value is as good as its source's last samples for this many sampling intervals.
HOLD_INTERVALS = 3.0


def _positive(value) -> float:
    f = float(value)
    if not f > 0 or math.isinf(f):
        raise ValueError(f"must be a finite number > 0: {value!r}")
    return f


def _correlation(value) -> float:
    f = float(value)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"must be in (0, 1]: {value!r}")
    return f


_OPTIONS = (
    Option("verdict.interval", _duration, 5.0,
           "How often the verdict is recomputed over the window (it is the costliest analysis; the window statistics of each source are refreshed every analysis.interval)."),
    Option("verdict.min-idle-ratio", parse_fraction, 0.15,
           "Idle fraction of the window below which a GPU counts as computing, whatever it waited for."),
    Option("verdict.min-cause-share", parse_fraction, 0.3,
           "Share of the idle time a cause must explain to be named the verdict."),
    Option("verdict.min-throttled-share", parse_fraction, 0.3,
           "Share of busy samples under power or thermal clock limits that makes a busy GPU 'throttled'."),
    Option("verdict.sm-idle-threshold", parse_fraction, 0.1,
           "SM activity (GPM) below which a GPU counts as idle; GPM sees through NCCL kernels that keep utilization at 100% while waiting."),
    Option("verdict.storage.io-pressure", parse_fraction, 0.1,
           "IO pressure (PSI io some) at which tasks count as stalled on storage."),
    Option("verdict.storage.queue-depth", _positive, 4.0,
           "Average in-flight requests on a disk that count as a long queue."),
    Option("verdict.storage.min-read-iops", _positive, 20.0,
           "Reads per second (disk or NFS read-path operations) below which nothing is being read; checkpoint writes are not a data-pipeline wait."),
    Option("verdict.storage.nfs-latency", _positive, 0.005,
           "Mean NFS operation execute time, in seconds, that counts as a slow remote file system."),
    Option("verdict.cpu.saturated-ratio", parse_fraction, 0.9,
           "Busy fraction of a core within one sampling interval at which it counts as saturated."),
    Option("verdict.cpu.owner-cores", _positive, 0.5,
           "CPU cores the GPU's owner must use for a saturated core to be blamed on its data pipeline."),
    Option("verdict.pcie.share", parse_fraction, 0.5,
           "Share of the PCIe link's capacity at which host-device copies count as the wait."),
    Option("verdict.network.anticorrelation", _correlation, 0.3,
           "How strongly (negative Pearson correlation) a link's rate must move against GPU utilization to count as aligned with its dips."),
    Option("verdict.network.burst-share", parse_fraction, 0.5,
           "Share of a link's peak rate in the window at which an instant counts as a burst."),
    Option("verdict.network.min-peak", _positive, 10e6,
           "Bytes per second a link must reach at its peak to be considered at all (idle links have noise, not bursts)."),
    Option("verdict.sync.peer-busy", parse_fraction, 0.5,
           "Utilization at which a peer GPU of the same owner counts as still computing."),
    Option("verdict.demand.owner-cores", _positive, 0.05,
           "CPU cores the GPU's owner must use, unless its threads wait on IO, for it to count as active (demand, A1)."),
    Option("verdict.dip.min-periodicity", parse_fraction, 0.3,
           "How cleanly dips must repeat (autocorrelation at the period) for their period to be published."),
)
for _option in _OPTIONS:
    register_option(_option)


@dataclass(frozen=True, slots=True)
class LinkAlignment:
    """How one NIC or RDMA port's traffic lines up with one GPU's utilization."""

    link: str  # "eth0", or "mlx5_0:1" for an RDMA port
    kind: str  # "netdev" or "rdma"
    link_layer: str  # "InfiniBand" or "Ethernet" for RDMA ports, "" for netdevs
    correlation: float | None
    aligned: bool


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


@dataclass
class _Grid:
    times: list[float]
    step: float

    def hold(self, view: WindowView, key) -> list[float]:
        return sample_and_hold(view.times, view.column(key), self.times, HOLD_INTERVALS * self.step)

    def rates(self, view: WindowView, key, gap: float, modulus: float | None = None) -> list[float]:
        return interval_rates_at(view.times, view.column(key), self.times, gap, modulus)

    def summed_rates(self, view: WindowView, keys, gap: float) -> list[float]:
        """Rate of the sum of several counters (a link's two directions): one pass, not two."""
        columns = [view.column(k) for k in keys]
        total = [sum(vals) for vals in zip(*columns)]  # NaN when any is missing: that sample is skipped
        return interval_rates_at(view.times, total, self.times, gap)


def _nan_max(columns: Sequence[Sequence[float]], n: int) -> list[float]:
    out = [math.nan] * n
    for column in columns:
        for i, v in enumerate(column):
            if v == v and not (out[i] >= v):
                out[i] = v
    return out


def _sum(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x + y if x == x and y == y else (x if x == x else y) for x, y in zip(a, b)]


class VerdictAnalyser:
    """Callable as a collector's ``analyse``: a pure function of the sampler's windows."""

    def __call__(self, inputs: AnalysisInputs, settings: Settings) -> NodeVerdict:
        gpu_view = inputs.views.get("gpu")
        if gpu_view is None or not gpu_view.times:
            return NodeVerdict((), "none")
        start = inputs.end - settings.analysis_window
        first = next((i for i, t in enumerate(gpu_view.times) if t >= start), len(gpu_view.times))
        grid = _Grid(gpu_view.times[first:], settings.sample_interval)
        if len(grid.times) < 3:
            return NodeVerdict((), "none")
        gpus = sorted({(k[1], k[2]) for k in gpu_view.columns if isinstance(k, tuple) and len(k) == 3},
                      key=lambda g: (int(g[0]) if str(g[0]).isdigit() else 1 << 30, g[1]))
        device = self._devices(inputs)
        owners = self._owner_activity(inputs)
        host = _HostEvidence(inputs, grid, settings)

        busy: dict[tuple[str, str], list[float]] = {}
        signal: dict[tuple[str, str], str] = {}
        for g in gpus:
            sm = grid.hold(gpu_view, ("sm",) + g)
            if any(v == v for v in sm):
                busy[g], signal[g] = sm, "sm_active"
            else:
                busy[g], signal[g] = grid.hold(gpu_view, ("util",) + g), "utilization"
        rules = VerdictRules(settings["verdict.min-idle-ratio"], settings["verdict.min-cause-share"],
                             settings["verdict.min-throttled-share"])
        results = []
        n = len(grid.times)
        for g in gpus:
            index, uuid = g
            info = device.get(uuid)
            owner = _primary_owner(info)
            threshold = settings["verdict.sm-idle-threshold"] if signal[g] == "sm_active" else settings["collector.gpu.idle-threshold"]
            evidence: dict[str, Sequence[bool]] = {
                "storage": host.storage,
                "data_pipeline": host.data_pipeline(owners.get(owner, (None, 0.0))[0] if owner else None, owner != ""),
                "host_transfer": self._host_transfer(gpu_view, grid, g, info, settings),
                "sync": self._sync(g, owner, busy, device, settings, n),
            }
            links = host.link_alignment(busy[g])
            evidence["network"] = host.network_evidence(links)
            evidence["checkpoint"] = host.checkpoint
            cores, blocked = owners.get(owner, (0.0, 0.0))
            active = owner != "" and (cores >= settings["verdict.demand.owner-cores"] or blocked >= 1)
            report = workload_evidence.reported(inputs.stats, owner)
            if report is not None:
                # The loop's own account outranks what the host suggests (A8, A13).
                active = workload_evidence.demand(report, settings)
                evidence = workload_evidence.with_data_wait(evidence, busy[g], threshold, report, settings)
            if not active:
                if report is not None:
                    # The loop itself reports too little to do (A1, A13): nothing to wait for.
                    evidence = {}
                else:
                    # Seen from the host only, a quiet owner may still be waiting: a job asleep
                    # in a socket read during an all-reduce uses no CPU. Host evidence stands;
                    # only a busy peer proves nothing, as inference GPUs each serve alone.
                    evidence.pop("sync", None)
            reasons = grid.hold(gpu_view, ("reasons",) + g)
            throttled = [r == r and (int(r) & CLOCK_LIMIT_BITS) != 0 for r in reasons]
            attribution = attribute(busy[g], evidence, [active] * n, throttled, threshold)
            period = dominant_period(busy[g], grid.step) if attribution.idle_ratio >= rules.min_idle_ratio else None
            if period is not None and period[1] < settings["verdict.dip.min-periodicity"]:
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

    # -- per GPU ---------------------------------------------------------------------------
    @staticmethod
    def _devices(inputs: AnalysisInputs) -> dict[str, object]:
        reading = inputs.latest.get("gpu_device")
        if reading is None:
            return {}
        return {d.uuid: d for d in getattr(reading.data, "gpus", ())}

    @staticmethod
    def _owner_activity(inputs: AnalysisInputs) -> dict[str, tuple[float, float]]:
        """Per owner (its GPU processes and their descendants, e.g. DataLoader workers): the
        CPU cores it used over its latest slow-tier interval, and its threads in D state."""
        view = inputs.views.get("gpu_device")
        if view is None:
            return {}
        activity = {}
        for key in view.columns:
            if isinstance(key, tuple) and key[0] == "owner_cpu":
                owner = key[1]
                rates = interval_rates(view.times, view.columns[key])
                running = [v for v in view.columns.get(("owner_running", owner), []) if v == v]
                blocked = [v for v in view.columns.get(("owner_blocked", owner), []) if v == v]
                # With one sample yet, a running thread is taken to use a core.
                cores = rates[-1] if rates else (running[-1] if running else 0.0)
                activity[owner] = (cores, blocked[-1] if blocked else 0.0)
        return activity

    @staticmethod
    def _host_transfer(view: WindowView, grid: _Grid, g, info, settings: Settings) -> list[bool]:
        link = getattr(info, "pcie", None)
        generation, width = getattr(link, "generation", None), getattr(link, "width", None)
        capacity = pcie_link_capacity(generation, width)
        if not capacity:
            return [False] * len(grid.times)
        gap = HOLD_INTERVALS * grid.step
        rate = grid.summed_rates(view, (("pcie_rx",) + g, ("pcie_tx",) + g), gap)
        if not any(v == v for v in rate):
            rate = _sum(grid.hold(view, ("gpm_pcie_rx",) + g), grid.hold(view, ("gpm_pcie_tx",) + g))
        limit = settings["verdict.pcie.share"] * capacity
        return [r == r and r >= limit for r in rate]

    @staticmethod
    def _sync(g, owner: str, busy, device, settings: Settings, n: int) -> list[bool]:
        if not owner:
            return [False] * n
        peers = [p for p in busy if p != g and _primary_owner(device.get(p[1])) == owner]
        if not peers:
            return [False] * n
        level = settings["verdict.sync.peer-busy"]
        return [any(busy[p][i] >= level for p in peers) for i in range(n)]


def _primary_owner(info) -> str:
    """The owner with the most processes on the GPU ("" when unknown or none)."""
    uses = getattr(info, "owners", ()) or ()
    if not uses:
        return ""
    return max(uses, key=lambda u: (u.processes, u.owner)).owner


class _HostEvidence:
    """Host-side evidence on the grid, computed once per pass and shared by all GPUs."""

    def __init__(self, inputs: AnalysisInputs, grid: _Grid, settings: Settings) -> None:
        self.inputs = inputs
        self.grid = grid
        self.settings = settings
        self.n = len(grid.times)
        self.gap = HOLD_INTERVALS * max(grid.step, settings.sample_interval)
        self.checkpoint = [False] * self.n
        self.storage = self._storage()
        self._saturated = self._saturated_cores()
        self._links = self._link_rates()

    def _psi(self, resource: str, scope: str) -> list[float] | None:
        view = self.inputs.views.get("pressure")
        if view is None or (resource, scope) not in view.columns:
            return None
        return self.grid.rates(view, (resource, scope), self.gap)

    def _storage(self) -> list[bool]:
        s = self.settings
        n = self.n
        reading = [False] * n
        long_queue = [False] * n
        disks = self.inputs.views.get("diskstats")
        if disks is not None:
            devices = {k[1] for k in disks.columns if isinstance(k, tuple) and k[0] == "reads"}
            min_iops, depth = s["verdict.storage.min-read-iops"], s["verdict.storage.queue-depth"]
            for device in devices:
                reads = self.grid.rates(disks, ("reads", device), self.gap)
                queue = self.grid.rates(disks, ("weighted", device), self.gap, TIME_FIELD_MODULUS_SECONDS)
                read_bytes = self.grid.rates(disks, ("read_bytes", device), self.gap)
                write_bytes = self.grid.rates(disks, ("write_bytes", device), self.gap)
                writes = self.grid.rates(disks, ("writes", device), self.gap)
                for i in range(n):
                    if reads[i] == reads[i] and reads[i] >= min_iops:
                        reading[i] = True
                        if queue[i] == queue[i] and queue[i] >= depth:
                            long_queue[i] = True
                    # A write burst that dwarfs the reads: the job is saving, not starving.
                    if (writes[i] == writes[i] and writes[i] >= min_iops and write_bytes[i] == write_bytes[i]
                            and write_bytes[i] > 4 * (read_bytes[i] if read_bytes[i] == read_bytes[i] else 0.0)):
                        self.checkpoint[i] = True
        slow_nfs = self._nfs_slow(reading)
        psi = self._psi("io", "some")
        if psi is not None:
            stalled = [p == p and p >= s["verdict.storage.io-pressure"] for p in psi]
        else:
            cpu = self.inputs.views.get("cpu")
            blocked = self.grid.hold(cpu, "procs_blocked") if cpu is not None else [math.nan] * n
            stalled = [b == b and b >= 1 for b in blocked]
        return [reading[i] and (stalled[i] or long_queue[i] or slow_nfs[i]) for i in range(n)]

    def _nfs_slow(self, reading: list[bool]) -> list[bool]:
        """Marks NFS read-path activity in ``reading`` and returns where it was slow. NFS is
        read on the slow tier, so its rates cover whole slow intervals."""
        view = self.inputs.views.get("nfs")
        slow = [False] * self.n
        if view is None:
            return slow
        gap = HOLD_INTERVALS * self.settings.slow_interval
        mounts = {k[1] for k in view.columns if isinstance(k, tuple) and k[0] == "ops"}
        min_ops, latency = self.settings["verdict.storage.min-read-iops"], self.settings["verdict.storage.nfs-latency"]
        for mount in mounts:
            ops_keys = [k for k in view.columns if isinstance(k, tuple) and k[0] == "ops" and k[1] == mount]
            total_ops = [0.0] * self.n
            total_ms = [0.0] * self.n
            for key in ops_keys:
                ops = self.grid.rates(view, key, gap)
                ms = self.grid.rates(view, ("exec",) + key[1:], gap)
                for i in range(self.n):
                    if ops[i] == ops[i] and ms[i] == ms[i]:
                        total_ops[i] += ops[i]
                        total_ms[i] += ms[i]
            for i in range(self.n):
                if total_ops[i] >= min_ops:
                    reading[i] = True
                    if total_ms[i] / 1000.0 / total_ops[i] >= latency:
                        slow[i] = True
        return slow

    def _saturated_cores(self) -> list[float]:
        view = self.inputs.views.get("cpu")
        if view is None:
            return [math.nan] * self.n
        level = self.settings["verdict.cpu.saturated-ratio"]
        cores = [k[1] for k in view.columns if isinstance(k, tuple) and k[0] == "busy"]
        busy_cols = [view.columns[("busy", c)] for c in cores]
        total_cols = [view.columns.get(("total", c)) for c in cores]
        counts: list[float] = []
        for j in range(len(view.times) - 1):
            count = 0
            for b, t in zip(busy_cols, total_cols):
                if t is None:
                    continue
                dt = t[j + 1] - t[j]
                if dt > 0 and (b[j + 1] - b[j]) >= level * dt:
                    count += 1
            counts.append(float(count))
        # Each count covers the interval that starts at its sample; hold it across the interval.
        return sample_and_hold(view.times[:-1], counts, self.grid.times, self.gap)

    def data_pipeline(self, owner_cores: float | None, owner_known: bool) -> list[bool]:
        if owner_known and (owner_cores is None or owner_cores < self.settings["verdict.cpu.owner-cores"]):
            return [False] * self.n
        return [c == c and c >= 1 for c in self._saturated]

    def _link_rates(self) -> list[tuple[LinkAlignment, list[float]]]:
        links = []
        netdev = self.inputs.views.get("netdev")
        if netdev is not None:
            for name in sorted({k[1] for k in netdev.columns if isinstance(k, tuple) and k[0] == "receive"}):
                rate = self.grid.summed_rates(netdev, (("receive", name), ("transmit", name)), self.gap)
                links.append((LinkAlignment(name, "netdev", "", None, False), rate))
        rdma = self.inputs.views.get("rdma_traffic")
        if rdma is not None:
            for key in sorted({k[1:] for k in rdma.columns if isinstance(k, tuple) and k[0] == "rx"}):
                device, port, layer = key
                rate = self.grid.summed_rates(rdma, (("rx",) + key, ("tx",) + key), self.gap)
                links.append((LinkAlignment(f"{device}:{port}", "rdma", layer, None, False), rate))
        return links

    def link_alignment(self, busy: Sequence[float]) -> list[tuple[LinkAlignment, list[bool]]]:
        """Each link's correlation with this GPU's activity, and its burst instants when the
        two move against each other (dips aligned with bursts, A10)."""
        s = self.settings
        out = []
        for link, rate in self._links:
            peak = max((r for r in rate if r == r), default=0.0)
            if peak < s["verdict.network.min-peak"]:
                out.append((link, [False] * self.n))
                continue
            r = pearson(busy, rate)
            aligned = r is not None and r <= -s["verdict.network.anticorrelation"]
            level = s["verdict.network.burst-share"] * peak
            bursts = [aligned and v == v and v >= level for v in rate]
            out.append((LinkAlignment(link.link, link.kind, link.link_layer, r, aligned), bursts))
        return out

    def network_evidence(self, links: list[tuple[LinkAlignment, list[bool]]]) -> list[bool]:
        evidence = [False] * self.n
        for link, bursts in links:
            if link.aligned:
                evidence = [a or b for a, b in zip(evidence, bursts)]
        return evidence


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
        waiting = [m for m in members if m.attribution.wait_ratio.get("sync", 0.0) >= settings["verdict.min-idle-ratio"]]
        if not waiting:
            continue
        slowest = min(members, key=lambda m: (m.attribution.idle_ratio, m.attribution.wait_ratio.get("sync", 0.0)))
        others = [m.attribution.idle_ratio for m in members if m is not slowest]
        if slowest not in waiting and min(others) - slowest.attribution.idle_ratio >= settings["verdict.min-idle-ratio"]:
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

