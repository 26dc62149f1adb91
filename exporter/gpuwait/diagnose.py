"""``gpuwait diagnose``: the article's order of search (A14), per GPU, with the evidence at
every step, from the metrics of a running exporter, a Prometheus server, a recorded trace or
a simulated scenario.

1. Impact or demand? (A1, A13)  2. Computing or waiting?  3. Waiting on what?  4. For the
scope (one GPU, a multi-GPU node, a multi-node job), the next checks, as commands.

The input is reduced to ``Metrics`` (metric name -> [(labels, value)]) first, so every source
gives the same report. Output is deterministic: GPUs in index order, causes by share then
name, numbers rounded.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from gpuwait.core.facts import WAIT_CAUSES

Labels = dict[str, str]
Metrics = dict[str, list[tuple[Labels, float]]]

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
SEVERITY_NAMES = {OK: "ok", WARNING: "warning", CRITICAL: "critical", UNKNOWN: "unknown"}
#: A throughput this far below the owner's own baseline is impact (A1).
IMPACT_DROP = 0.2
#: Waits smaller than this share of the window are not listed.
MIN_LISTED_SHARE = 0.05


class DiagnoseError(Exception):
    """The input could not be read or lacks what a diagnosis needs; the message says which
    and what it means."""


# -- inputs ---------------------------------------------------------------------------------


def from_exposition(text: str) -> Metrics:
    from prometheus_client.parser import text_string_to_metric_families

    metrics: Metrics = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                metrics.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except ValueError as e:
        raise DiagnoseError(f"not a Prometheus exposition: {e}") from None
    return metrics


def from_exporter(url: str, timeout: float = 10.0) -> Metrics:
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parsed.path in ("", "/"):
        parsed = parsed._replace(path="/metrics")
    target = urllib.parse.urlunsplit(parsed)
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        raise DiagnoseError(f"exporter at {target} answered HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DiagnoseError(f"exporter at {target} is unreachable: {reason}") from None
    return from_exposition(text)


def _prometheus_query(base: str, query: str, timeout: float) -> list[dict]:
    url = f"{base.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as e:
        try:
            detail = json.load(e).get("error", e.reason)
        except (ValueError, OSError):
            detail = e.reason
        raise DiagnoseError(f"Prometheus at {base} refused the query: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        raise DiagnoseError(f"Prometheus at {base} is unreachable: {getattr(e, 'reason', e)}") from None
    except ValueError:
        raise DiagnoseError(f"{base} did not answer as a Prometheus server (not JSON)") from None
    if body.get("status") != "success":
        raise DiagnoseError(f"Prometheus at {base}: {body.get('error', 'query failed')}")
    return body["data"]["result"]


def _selector(instance: str | None) -> str:
    return f',instance="{instance}"' if instance else ""


def from_prometheus(base: str, instance: str | None = None, since: str = "1h", timeout: float = 10.0) -> Metrics:
    """The latest value of every gpuwait series of one exporter, and as
    ``gpuwait_workload_baseline_samples_per_second`` each owner's mean throughput over
    ``since`` (the baseline the current throughput is compared with, A1)."""
    result = _prometheus_query(base, '{__name__=~"gpuwait_.+"%s}' % _selector(instance), timeout)
    instances = sorted({r["metric"].get("instance", "") for r in result})
    if not result:
        where = f" for instance {instance!r}" if instance else ""
        raise DiagnoseError(f"Prometheus at {base} has no gpuwait_ series{where}: is the exporter scraped (up{{job=...}})?")
    if len(instances) > 1:
        raise DiagnoseError(f"Prometheus at {base} holds several exporters; choose one with --instance: {', '.join(instances)}")
    metrics: Metrics = {}
    for r in result:
        labels = {k: v for k, v in r["metric"].items() if k not in ("__name__", "instance", "job")}
        metrics.setdefault(r["metric"]["__name__"], []).append((labels, float(r["value"][1])))
    baseline = _prometheus_query(
        base, f'avg_over_time(gpuwait_workload_window_samples_per_second{{instance="{instances[0]}"}}[{since}])', timeout)
    for r in baseline:
        labels = {k: v for k, v in r["metric"].items() if k not in ("__name__", "instance", "job")}
        metrics.setdefault("gpuwait_workload_baseline_samples_per_second", []).append((labels, float(r["value"][1])))
    return metrics


def from_samples(samples: Iterable) -> Metrics:
    """Samples as the exposition yields them (name, label values, value), with the catalog's
    label names; counters are left out (a diagnosis reads window statistics)."""
    from gpuwait.catalog import CATALOG

    metrics: Metrics = {}
    for s in samples:
        if s.value is None:
            continue
        spec = CATALOG[s.name]
        metrics.setdefault(s.name, []).append((dict(zip(spec.labels, s.labels)), float(s.value)))
    return metrics


def _expose_all(sampler) -> Metrics:
    from gpuwait.core.plugin import Snapshot

    samples = []
    sampler.summarize_due()
    for collector in sampler.collectors:
        snapshots = {s.name: sampler.states[s.name].snapshot() for s in collector.sources}
        if collector.analyse is not None:
            snapshots[collector.name] = Snapshot(None, sampler.analyses.get(collector.name))
        samples.extend(collector.expose(snapshots, sampler.settings))
    return from_samples(samples)


def from_trace(path: str) -> Metrics:
    """Replays the trace as fast as it can through the exporter's own analysis."""
    from gpuwait.cli import payload_types
    from gpuwait.core.registry import registry, resolve
    from gpuwait.core.sampler import Sampler
    from gpuwait.trace.file import TraceError, TraceReader
    from gpuwait.trace.replay import ReplayedSource, Replayer

    collectors = list(registry())
    settings = resolve([])[0]
    try:
        reader = TraceReader(path, payload_types(collectors))
    except (OSError, TraceError) as e:
        raise DiagnoseError(f"cannot read trace {path}: {e}") from None
    sampler = Sampler(collectors, settings, make_source=lambda spec, _s: ReplayedSource(spec.name, spec.tier or "fast"))
    replayer = Replayer(sampler, reader, speed=0)
    replayer.run()
    if replayer.error:
        raise DiagnoseError(f"trace {path}: {replayer.error}")
    return _expose_all(sampler)


def from_simulation(name: str, params: str = "", duration: float = 65.0) -> Metrics:
    """A simulated scenario run in virtual time (the golden outputs of the tests)."""
    from gpuwait.simulate.model import get
    from gpuwait.simulate.run import parse_params, run_virtual
    from gpuwait.simulate.table import default_settings

    try:
        scenario = get(name)
        if params:
            scenario = scenario.with_params(**parse_params(params))
    except (KeyError, ValueError) as e:
        raise DiagnoseError(f"simulation: {e.args[0] if e.args else e}") from None
    return _expose_all(run_virtual(scenario, default_settings(), duration))


# -- the diagnosis --------------------------------------------------------------------------


@dataclass
class Step:
    question: str
    answer: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class GpuDiagnosis:
    gpu: str
    uuid: str
    owner: str
    verdict: str
    scope: str
    severity: int
    steps: list[Step]
    #: cause -> share of the window
    waits: dict[str, float]
    checks: str


@dataclass
class Report:
    source: str
    verdict: str
    severity: int
    gpus: list[GpuDiagnosis]
    notes: list[str]
    #: check list name -> commands, referred to by GpuDiagnosis.checks
    checks: dict[str, list[str]]

    def to_json(self) -> str:
        out = asdict(self)
        out["severity_name"] = SEVERITY_NAMES[self.severity]
        return json.dumps(out, indent=2, sort_keys=True)


class _Index:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def series(self, name: str, **match: str) -> list[tuple[Labels, float]]:
        return [(l, v) for l, v in self.metrics.get(name, ()) if all(l.get(k) == m for k, m in match.items())]

    def value(self, name: str, **match: str) -> float | None:
        found = [v for _, v in self.series(name, **match) if not math.isnan(v)]
        return found[0] if found else None

    def has(self, name: str) -> bool:
        return bool(self.metrics.get(name))


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{round(100 * x)}%"


def _num(x: float | None, digits: int = 1) -> str:
    return "?" if x is None else f"{x:.{digits}f}"


def _rate(bytes_per_second: float | None) -> str:
    return "?" if bytes_per_second is None else f"{bytes_per_second / 1e9:.2f} GB/s"


def _gpu_order(key: tuple[str, str]) -> tuple[int, str]:
    return (int(key[0]) if key[0].isdigit() else 1 << 30, key[1])


def diagnose(metrics: Metrics, source: str, owner: str | None = None) -> Report:
    m = _Index(metrics)
    if not m.has("gpuwait_gpu_verdict"):
        raise DiagnoseError(_missing_verdict(m))
    notes = []
    if not m.has("gpuwait_gpu_window_sm_active_mean_ratio"):
        notes.append("gpuwait_gpu_window_sm_active_mean_ratio is absent: no GPM metrics (GPUs before Hopper, or GPM"
                     " disabled), so idle time is judged on utilization, which counts a kernel spinning in a"
                     " collective as busy; waits on the network and on peers can be underestimated.")
    if not m.has("gpuwait_workload_processes"):
        notes.append("gpuwait_workload_* are absent: no instrumented loop reports its data wait and throughput on this"
                     " node, so impact is not measured and data waits are inferred from the host (docs/workload.md).")
    gpus = sorted({(l["gpu"], l["uuid"]) for l, _ in m.series("gpuwait_gpu_verdict")}, key=_gpu_order)
    lost = sorted({(l["gpu"], l["uuid"]) for l, v in m.series("gpuwait_gpu_up") if v == 0}, key=_gpu_order)
    owners = _owners(m)
    if owner:
        gpus = [g for g in gpus if owners.get(g) == owner]
        if not gpus:
            known = sorted({o for o in owners.values() if o})
            raise DiagnoseError(f"no GPU of owner {owner!r} in the metrics; owners seen: {', '.join(known) or 'none'}")
    node_gpus = len({g for g in owners} | set(gpus)) or len(gpus)
    has_rdma = m.has("gpuwait_rdma_port_info") or any(l.get("link_kind") == "rdma" for l, _ in m.series("gpuwait_gpu_link_correlation"))
    checks: dict[str, list[str]] = {}
    diagnoses = [_diagnose_gpu(m, g, owners.get(g, ""), node_gpus, has_rdma, checks) for g in gpus]
    for g in lost:
        if owner and owners.get(g) != owner:
            continue
        notes.append(f"GPU {g[0]} ({g[1]}) is down (gpuwait_gpu_up 0): it fell off the bus or the driver lost it;"
                     f" check `nvidia-smi -q -i {g[0]}` and `journalctl -k | grep -i xid`.")
    severity = max([d.severity for d in diagnoses] + ([CRITICAL] if lost else []), default=OK)
    node_verdict = next((l["cause"] for l, v in m.series("gpuwait_node_verdict") if v == 1), "none")
    return Report(source, node_verdict, severity, diagnoses, notes, checks)


def _missing_verdict(m: _Index) -> str:
    if not m.has("gpuwait_gpu_up"):
        backend = m.value("gpuwait_gpu_backend_up")
        if backend == 0:
            return ("gpuwait_gpu_up is missing and gpuwait_gpu_backend_up is 0: the exporter cannot talk to the NVIDIA"
                    " driver (NVML), so there are no GPU metrics to diagnose")
        return ("gpuwait_gpu_verdict and gpuwait_gpu_up are missing: the gpu collector is disabled (--no-collector.gpu)"
                " or this is not a gpuwait exporter")
    return ("gpuwait_gpu_verdict is missing: the verdict collector is disabled (--no-collector.verdict) or the exporter"
            " started less than a few seconds ago and has not analysed a window yet")


def _diagnose_gpu(m: _Index, g: tuple[str, str], owner: str, node_gpus: int, has_rdma: bool,
                  checks: dict[str, list[str]]) -> GpuDiagnosis:
    gpu, uuid = g
    key = {"gpu": gpu, "uuid": uuid}
    verdict = next((l["cause"] for l, v in m.series("gpuwait_gpu_verdict", **key) if v == 1), "none")
    waits = {l["cause"]: v for l, v in m.series("gpuwait_gpu_wait_ratio", **key)}
    idle = sum(waits.values())
    demand = m.value("gpuwait_gpu_demand", **key)
    work = _workload(m, owner)

    # 1. Impact or demand?
    evidence = []
    if work is not None:
        kind = work["kind"]
        if kind == "inference":
            evidence.append(f"inference loop: {_num(work.get('requests'), 2)} requests/s")
        evidence.append(f"{kind} loop: {_num(work.get('samples'))} samples/s, {_num(work.get('steps'), 2)} steps/s,"
                        f" step time {_num(work.get('step'), 3)} s")
    drop = work.get("drop") if work else None
    if drop is not None:
        evidence.append(f"throughput {_pct(drop)} below the owner's own baseline")
    if demand == 0:
        first = Step("Impact or demand?", "no demand: nothing asks this GPU for work (A1, A13)", evidence)
    else:
        impact = drop is not None and drop >= IMPACT_DROP
        if impact:
            answer = "impact: the owner's throughput dropped"
        elif drop is not None:
            answer = "demand, throughput steady"
        else:
            answer = "demand (its owner is active); impact not measured"
        first = Step("Impact or demand?", answer, evidence)

    # 2. Computing or waiting?
    util = m.value("gpuwait_gpu_window_utilization_mean_ratio", **key)
    sm = m.value("gpuwait_gpu_window_sm_active_mean_ratio", **key)
    throttled_busy = m.value("gpuwait_gpu_throttled_busy_ratio", **key)
    activity = [", ".join([f"utilization {_pct(util)}"] + ([f"SM active {_pct(sm)}"] if sm is not None else [])
                          + [f"idle {_pct(idle)} of the window"])]
    if work is not None and work.get("data") is not None:
        activity.append(f"loop time: data wait {_pct(work['data'])}, compute {_pct(work.get('compute'))},"
                        f" communication {_pct(work.get('comm'))} (A8)")
    stalled = m.value("gpuwait_gpu_collective_stalled", **key) == 1
    if stalled:
        # Busy by every utilization figure, yet no progress: the first thing to know (A9, A12).
        second = Step("Computing or waiting?", "waiting in a collective that does not end: a peer has not joined",
                      activity + ["kernel resident, few SMs active, memory resting, no bytes over NVLink or PCIe"
                                  " (gpuwait_gpu_collective_stalled; runbook GpuCollectiveStalled)"])
    elif verdict == "throttled":
        second = Step("Computing or waiting?", "computing, slowed by power or thermal limits", activity +
                      [f"{_pct(throttled_busy)} of busy samples under clock limits"] + _throttle_reasons(m, key))
    elif verdict == "none" and demand == 0:
        second = Step("Computing or waiting?", "idle without demand: nothing to fix", activity)
    elif verdict == "none":
        second = Step("Computing or waiting?", "computing" if idle < 0.15 else "idle, no single cause", activity)
    else:
        second = Step("Computing or waiting?", "waiting", activity)

    # 3. Waiting on what?
    listed = sorted(((c, s) for c, s in waits.items() if c in WAIT_CAUSES and s >= MIN_LISTED_SHARE),
                    key=lambda cs: (-round(cs[1], 2), cs[0]))
    third_evidence = []
    for cause, share in listed:
        third_evidence.append(f"{cause}: {_pct(share)} of the window")
        third_evidence.extend("  " + e for e in _cause_evidence(m, cause, key, owner, work))
    third = Step("Waiting on what?", verdict if verdict in WAIT_CAUSES else "nothing that needs fixing", third_evidence)

    # 4. Scope and next checks.
    # The job spans nodes when its collective traffic shows: an RDMA port bursting with the
    # dips, or a network or peer wait that no GPU of this node explains. A NIC aligned with a
    # storage wait is file traffic (NFS), not a sign of other nodes.
    aligned = {l.get("link_kind") for l, v in m.series("gpuwait_gpu_link_aligned", **key) if v == 1}
    collective = verdict == "network" or (verdict == "sync" and not _waited_for(m, gpu, owner))
    if "rdma" in aligned or (collective and (aligned or has_rdma)):
        scope = "multi-node"
    elif node_gpus > 1:
        scope = "multi-GPU node"
    else:
        scope = "single GPU"
    name = f"{verdict} / {scope}"
    if verdict in WAIT_CAUSES or verdict == "throttled":
        checks.setdefault(name, _checks(verdict, scope))
    fourth = Step("Scope and next checks", f"{scope}: see checks [{name}]" if name in checks else f"{scope}: none needed")

    if verdict in WAIT_CAUSES:
        severity = CRITICAL if (drop is not None and drop >= IMPACT_DROP) else WARNING
    elif verdict == "throttled":
        severity = WARNING
    else:
        severity = OK
    return GpuDiagnosis(gpu, uuid, owner, verdict, scope, severity, [first, second, third, fourth],
                        {c: round(s, 3) for c, s in sorted(waits.items()) if s > 0}, name if name in checks else "")


def _workload(m: _Index, owner: str) -> dict | None:
    if not owner or m.value("gpuwait_workload_window_data_wait_ratio", owner=owner) is None and \
            m.value("gpuwait_workload_window_steps_per_second", owner=owner) is None:
        return None
    kind = next((l.get("kind", "training") for l, _ in m.series("gpuwait_workload_window_steps_per_second", owner=owner)), "training")
    w = {
        "kind": kind,
        "data": m.value("gpuwait_workload_window_data_wait_ratio", owner=owner),
        "compute": m.value("gpuwait_workload_window_compute_ratio", owner=owner),
        "comm": m.value("gpuwait_workload_window_comm_ratio", owner=owner),
        "step": m.value("gpuwait_workload_window_step_seconds", owner=owner),
        "steps": m.value("gpuwait_workload_window_steps_per_second", owner=owner),
        "samples": m.value("gpuwait_workload_window_samples_per_second", owner=owner),
        "requests": m.value("gpuwait_workload_window_requests_per_second", owner=owner),
        "drop": m.value("gpuwait_workload_window_throughput_drop_ratio", owner=owner),
    }
    baseline = m.value("gpuwait_workload_baseline_samples_per_second", owner=owner)
    if baseline and w["samples"] is not None:
        w["drop"] = max(w["drop"] or 0.0, min(1.0, max(0.0, 1 - w["samples"] / baseline)))
    return w


def _throttle_reasons(m: _Index, key: Mapping[str, str]) -> list[str]:
    reasons = sorted(((l["reason"], v) for l, v in m.series("gpuwait_gpu_window_clocks_event_ratio", **key) if v >= 0.05),
                     key=lambda rv: (-round(rv[1], 2), rv[0]))
    return [f"clock event {r}: {_pct(v)} of the window" for r, v in reasons]


def _max_by(m: _Index, name: str, label: str) -> tuple[str, float] | None:
    found = [(l.get(label, ""), v) for l, v in m.series(name) if not math.isnan(v)]
    return max(found, key=lambda lv: (lv[1], lv[0])) if found else None


def _cause_evidence(m: _Index, cause: str, key: Mapping[str, str], owner: str, work: dict | None) -> list[str]:
    out = []
    if cause in ("data_pipeline", "storage") and work is not None and work.get("data") is not None:
        out.append(f"the loop reports {_pct(work['data'])} of its time waiting for the next batch (A8)")
    if cause == "data_pipeline":
        saturated = m.value("gpuwait_cpu_window_saturated_cores")
        busiest = m.value("gpuwait_cpu_window_busy_max_ratio")
        out.append(f"{_num(saturated, 0)} cores saturated over the window, busiest core {_pct(busiest)} busy,"
                   f" all cores {_pct(m.value('gpuwait_cpu_window_busy_mean_ratio'))} (A2, A3)")
    elif cause == "storage":
        io = m.value("gpuwait_pressure_window_stalled_ratio", resource="io", scope="some")
        out.append(f"IO pressure (some): {_pct(io)} of the window (A6)")
        disk = _max_by(m, "gpuwait_disk_window_queue_depth_mean", "device")
        if disk:
            await_s = m.value("gpuwait_disk_window_read_await_seconds", device=disk[0])
            reads = m.value("gpuwait_disk_window_reads_per_second", device=disk[0])
            out.append(f"disk {disk[0]}: queue depth {_num(disk[1])}, {_num(reads, 0)} reads/s,"
                       f" read await {_num(None if await_s is None else await_s * 1000)} ms (A7)")
        nfs = _max_by(m, "gpuwait_nfs_window_metadata_ratio", "mount")
        if nfs and nfs[1] > 0:
            out.append(f"NFS {nfs[0]}: {_pct(nfs[1])} of operations are metadata (A7)")
    elif cause == "host_transfer":
        rx = m.value("gpuwait_gpu_window_pcie_throughput_bytes_per_second", direction="rx", **key)
        tx = m.value("gpuwait_gpu_window_pcie_throughput_bytes_per_second", direction="tx", **key)
        gen, width = m.value("gpuwait_gpu_pcie_link_generation", **key), m.value("gpuwait_gpu_pcie_link_width", **key)
        max_gen, max_width = m.value("gpuwait_gpu_pcie_link_max_generation", **key), m.value("gpuwait_gpu_pcie_link_max_width", **key)
        out.append(f"PCIe rx {_rate(rx)}, tx {_rate(tx)} on a Gen{_num(gen, 0)} x{_num(width, 0)} link (A9)")
        if gen is not None and width is not None and max_gen is not None and max_width is not None and (gen < max_gen or width < max_width):
            out.append(f"link trained below its maximum Gen{_num(max_gen, 0)} x{_num(max_width, 0)}: reseat or check the slot")
        elif gen is not None and max_gen is not None:
            out.append("the link runs at its maximum: the GPU waits for copies it could overlap with its kernels "
                       "(pinned memory, non_blocking copies on a side stream)")
    elif cause == "network":
        links = sorted((l["link"], l.get("link_layer", ""), v) for l, v in m.series("gpuwait_gpu_link_correlation", **key)
                       if m.value("gpuwait_gpu_link_aligned", link=l["link"], **key) == 1)
        for link, layer, r in links:
            out.append(f"{link}{' (' + layer + ')' if layer else ''} bursts while the GPU dips: correlation {_num(r, 2)} (A10, A11)")
        period = m.value("gpuwait_gpu_dip_period_seconds", **key)
        if period is not None:
            out.append(f"dips repeat every {_num(period, 2)} s (periodicity {_pct(m.value('gpuwait_gpu_dip_periodicity_ratio', **key))}):"
                       " a collective each step (A9)")
    elif cause == "sync":
        peers = _waited_for(m, key["gpu"], owner)
        if peers:
            out.extend(f"the peer it waits for: {p} (A12)" for p in peers)
        else:
            out.append("no GPU of this node holds its peers up: the peer it waits for is on another node (A12)")
        if work is not None and work.get("comm") is not None:
            out.append(f"the loop reports {_pct(work['comm'])} of its time in communication")
    elif cause == "insufficient_work":
        out.append("idle with demand and no upstream evidence: batches too small, launch overhead or serial"
                   " host code between kernels (A4)")
    return out


def _waited_for(m: _Index, gpu: str, owner: str) -> list[str]:
    """The owner's other GPUs on this node that hold it up: the straggler, and peers that
    are themselves waiting on something other than a peer."""
    if not owner:
        return []
    peers = sorted((g for (g, _), o in _owners(m).items() if o == owner and g != gpu), key=lambda i: _gpu_order((i, "")))
    out = []
    for peer in peers:
        cause = next((l["cause"] for l, v in m.series("gpuwait_gpu_verdict", gpu=peer) if v == 1), "none")
        own_wait = cause in WAIT_CAUSES and cause != "sync"
        if m.value("gpuwait_gpu_straggler", gpu=peer) == 1:
            # The last to reach the barrier: it computes longest, or is held up by a wait of its own.
            out.append(f"GPU {peer}, the straggler (the last at the barrier" + (f", itself waiting on {cause})" if own_wait else ")"))
        elif own_wait:
            out.append(f"GPU {peer}, itself waiting on {cause}")
    return out


def _owners(m: _Index) -> dict[tuple[str, str], str]:
    return {(l["gpu"], l["uuid"]): l.get("owner", "") for l, v in m.series("gpuwait_gpu_owner_info") if v == 1}


_COMMON = {
    "single GPU": ["nvidia-smi dmon -s pucm -d 1 -c 10", "top -H -b -n 1 | head -40", "free -g"],
    "multi-GPU node": ["nvidia-smi topo -m", "nvidia-smi nvlink --status"],
    "multi-node": ["ibstat", "ibv_devinfo -v | grep -E 'state|active_mtu|link_layer'",
                   "# rerun the job with NCCL_DEBUG=INFO to see the transports and rings NCCL chose"],
}
_BY_CAUSE = {
    "data_pipeline": ["mpstat -P ALL 1 5", "pidstat -t -u -p <pid> 1 5", "py-spy dump --pid <pid>",
                      "# raise DataLoader num_workers, pin_memory=True, prefetch_factor; move decoding out of the main process"],
    "storage": ["cat /proc/pressure/io", "iostat -x 1 5", "nfsiostat 1 5",
                "# stage the data set on local NVMe, read larger blocks, pack small files into shards"],
    "host_transfer": ["nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv",
                      "lspci -vv -s <pci_bus_id> | grep -E 'LnkCap|LnkSta'",
                      "# use pinned memory and non_blocking copies; keep data on the GPU between steps"],
    "network": ["perfquery -x", "ethtool -S <netdev> | grep -iE 'pause|ecn|cnp|discard'",
                "all_reduce_perf -b 8 -e 1G -f 2 -g <gpus per node> (nccl-tests)"],
    "sync": ["py-spy dump --pid <straggler pid>", "nvidia-smi -q -d PERFORMANCE -i <straggler gpu>",
             "# compare step times per rank; rebalance the data or the pipeline stages"],
    "insufficient_work": ["nsys profile -t cuda,nvtx -d 20 -o gpuwait-profile <command>",
                          "# raise the batch size, use CUDA graphs or fuse small kernels"],
    "throttled": ["nvidia-smi -q -d PERFORMANCE", "nvidia-smi -q -d POWER,TEMPERATURE",
                  "# check the cooling, and the power cap against the default: nvidia-smi -q -d POWER | grep -i limit"],
}


def _checks(verdict: str, scope: str) -> list[str]:
    # A14: a single GPU first, then what a node adds, then what a multi-node job adds.
    scopes = ["single GPU"] + (["multi-GPU node"] if scope != "single GPU" else []) + (["multi-node"] if scope == "multi-node" else [])
    commands = list(_BY_CAUSE.get(verdict, []))
    for s in scopes:
        commands.extend(c for c in _COMMON[s] if c not in commands)
    return commands


def render_text(report: Report) -> str:
    lines = [f"gpuwait diagnose: {report.source}",
             f"node verdict: {report.verdict}; severity: {SEVERITY_NAMES[report.severity]}", ""]
    for d in report.gpus:
        lines.append(f"GPU {d.gpu} {d.uuid}  owner {d.owner or '-'}  verdict {d.verdict}")
        for number, step in enumerate(d.steps, 1):
            lines.append(f"  {number}. {step.question} -> {step.answer}")
            lines.extend(f"       {e}" for e in step.evidence)
        lines.append("")
    for name, commands in sorted(report.checks.items()):
        lines.append(f"checks [{name}]:")
        lines.extend(f"  {c}" if c.startswith("#") else f"  $ {c}" for c in commands)
        lines.append("")
    if report.notes:
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in report.notes)
    return "\n".join(lines).rstrip() + "\n"
