"""The scenario table of docs/verdicts.md: every scenario run through the real analysis, and
what it concluded. ``python -m gpuwait.simulate.table > docs/verdicts.md``."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass

from gpuwait.analysis.verdict import GpuVerdict, NodeVerdict
from gpuwait.core.config import Settings
from gpuwait.core.facts import CAUSES
from gpuwait.core.registry import registry, resolve
from gpuwait.simulate.model import SCENARIOS, Scenario
from gpuwait.simulate.run import run_virtual

#: Long enough for one full analysis window after the start-up transient.
DURATION = 65.0


@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    result: NodeVerdict

    def affected(self) -> list[GpuVerdict]:
        wanted = {str(i) for i in self.scenario.affected_gpus()}
        return [g for g in self.result.gpus if g.index in wanted]

    def produced(self) -> str:
        verdicts = Counter(g.verdict for g in self.affected())
        return ", ".join(f"{v} ×{n}" if n > 1 else v for v, n in verdicts.most_common())


#: Measured, not computed here: on the evaluation set's onset traces (docs/evaluation.md),
#: which the verdict was not written against.
TIME_TO_VERDICT = (
    "## Time to verdict",
    "",
    "How long after a wait begins the verdict names it, on the 15 onset traces of the evaluation set",
    "(docs/evaluation.md: node traces that run healthy, then a mechanism begins at a known time),",
    "measured by `python3 bench/time_to_verdict.py --jobs 2` in trace time. \"From the impact\" counts",
    "from the first second the GPU is affected (it waits more, or computes at reduced clocks), which a",
    "buffer puts after the mechanism's onset: 22 s of prepared batches after a page-cache eviction.",
    "",
    "| truth after the onset | GPUs | first right, from the onset: median | p90 | within 15 s | from the impact: median | p90 | within 15 s |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    "| `data_pipeline` | 16 | 10 s | 12 s | 100 % | 9 s | 10 s | 100 % |",
    "| `host_transfer` | 1 | 4 s | 4 s | 100 % | 4 s | 4 s | 100 % |",
    "| `insufficient_work` | 8 | 8 s | 8 s | 100 % | 8 s | 8 s | 100 % |",
    "| `network` | 8 | 14 s | 14 s | 100 % | 14 s | 14 s | 100 % |",
    "| `storage` | 16 | 14 s | 30 s | 50 % | 8 s | 11 s | 100 % |",
    "| `sync` | 15 | 6 s | 10 s | 100 % | 6 s | 10 s | 100 % |",
    "| `throttled` | 10 | 8 s | 8 s | 100 % | 8 s | 8 s | 100 % |",
    "| all | 74 | 10 s | 30 s | 89 % | 8 s | 14 s | 100 % |",
    "",
    "The settled verdict (right from then to the end of the trace) comes at the same times: no onset",
    "flaps after it is first named, and the 42 GPUs whose truth does not change (a checkpoint that",
    "begins, inference load that drops, a co-tenant's compile or backup, bystanders) were given no",
    "wrong verdict on any pass after their onset.",
)


def default_settings() -> Settings:
    registry()
    return resolve([])[0]


def run(scenario: Scenario, settings: Settings | None = None, duration: float = DURATION) -> Outcome:
    sampler = run_virtual(scenario, settings or default_settings(), duration)
    return Outcome(scenario, sampler.analyses["verdict"])


def run_all(settings: Settings | None = None) -> dict[str, Outcome]:
    settings = settings or default_settings()
    return {name: run(scenario, settings) for name, scenario in SCENARIOS.items()}


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render(outcomes: dict[str, Outcome]) -> str:
    lines = [
        "# Verdicts",
        "",
        "What gpuwait concludes for each simulated scenario, produced by running every scenario through",
        "the real sampler, window analysis and verdict (`python -m gpuwait.simulate.table > docs/verdicts.md`;",
        "a test fails when this page and the code disagree). Scenarios run on a simulated 8-GPU node",
        f"for {DURATION:g} s of node time at the default settings (`gpuwait-exporter --simulate NAME` serves one live).",
        "",
        "How a verdict is reached (A14); each rule is stated with its source in the module that applies it",
        "(`gpuwait/analysis/`):",
        "",
        "1. **Idle time is fractional** (analysis.activity). A driver utilization sample is the share of",
        "   its period (1/6 s to 1 s) in which a kernel ran, stamped at the period's end. An instant",
        "   stands for the sampling step that starts at it (a counter's rate there covers that step),",
        "   so it takes the sample whose period covers the step's middle, GPM's likewise, and is idle",
        "   for `1 - u` of its length: gaps shorter than a sample still count, and utilization lines",
        "   up with the link rates it is correlated with. With GPM, an instant whose kernels kept",
        "   fewer SMs busy than `verdict.sm-idle-threshold` (SM activity below that share of the",
        "   time a kernel ran) is idle whatever utilization says, with a kernel resident.",
        "2. **A resident collective is a wait** where something explains it. NCCL kernels keep",
        "   utilization at 100 % on the few SMs their channels occupy while they wait: with GPM, SM",
        "   activity at most `verdict.collective.footprint-share` of the GPU's own working level, with",
        "   memory traffic resting, counts as waiting, for the share of the instant its activity puts",
        "   it at the collective's own level rather than the working level (all of it at that level),",
        "   where a link bursts in step with it (network), a",
        "   peer of the same owner is still computing (sync), or nothing moves on the GPU's PCIe link,",
        "   its NVLinks or any NIC of the host (sync, inferred: its data is not late, a peer is; the",
        "   peer may be on another node). Without GPM the memory controller stands in for SM",
        "   activity, against a peer that has no kernel at all only.",
        "3. **Evidence is scoped to the GPU's owner** (its processes and their descendants). A GPU",
        "   with no process is `none`. Storage evidence (reads in flight with tasks stalled on IO, a",
        "   long disk queue, slow NFS or NFS callers waiting on the server at every instant,",
        "   `verdict.storage.nfs-waiters`: NFS RPC waits are not IO stalls to PSI) counts for an owner",
        "   whose threads were seen in D state, or whose processes read from block devices at",
        "   `verdict.storage.owner-read-bytes` over the window (/proc/<pid>/io read_bytes: a counter,",
        "   which a short read phase cannot slip between, as it can between 5 s snapshots of the",
        "   thread states); CPU evidence for an owner that uses the CPU;",
        "   host-wide evidence only for a GPU whose owner cannot be told, at the lowest strength.",
        "4. **The strongest evidence takes the instant**, not the first in a fixed order. Direct: PCIe",
        "   at `verdict.pcie.share` of the link's trained capacity, or a copy at the rate the link's",
        "   copies run while no NIC or RDMA port of the host moves a tenth of its bytes (a kernel cannot",
        "   start before the copy it reads completes; a copy from pageable memory runs at the host's",
        "   memcpy rate, under the link's capacity; GPUDirect RDMA bytes cross the link with a NIC's),",
        "   a link bursting in step with the",
        "   waits, the owner's threads stalled on reads, the owner's runnable threads exceeding the CPU",
        "   it receives (a CFS quota, `verdict.cpu.runnable-excess`; with the owner cgroup read, its",
        "   throttled periods, `verdict.cpu.throttled-periods`), a peer computing at the barrier,",
        "   the loop's own data-wait account. Inferred: a saturated core while the owner uses at least",
        "   `verdict.cpu.owner-cores` of CPU, about one core (an owner using less cannot be what",
        "   saturates it), beyond the owner's threads that spin through the whole instant on a kernel",
        "   or a copy of their GPU (one per GPU-driving process: CUDA's default schedule spins the",
        "   waiting thread, and a synchronous copy holds it as a kernel does); a resident wait while a",
        "   peer has no kernel. Equal strengths follow the method's order.",
        "   A loop that times its wait for the next batch and reports less than",
        "   `verdict.workload.min-data-wait` contradicts inferred input-side evidence: only direct",
        "   storage and data-pipeline evidence stands for it (A8). An instrumented inference server's",
        "   time outside its loop (waiting for the next request) explains as much of its GPU's idle",
        "   time, the most idle instants first, as `none`: no request was queued (A13). Before",
        "   any of these, the idle time a copy into the GPU covers (its received bytes at the",
        "   link's capacity, which no copy outruns, with no NIC moving a tenth as many) waited for",
        "   that copy: the batch being copied was ready, so no loader or disk behind it was the",
        "   wait (`none` within the job's own pause, a checkpoint's copies).",
        "5. **Links are aligned** when their traffic moves against the GPU's activity (correlation at or",
        "   below -`verdict.network.anticorrelation`) or when `verdict.network.bursts-in-waits` of their",
        "   bursts fall in the GPU's waits, far more than the waits' own share of the window.",
        "6. **NCCL's own timing outranks the host's inference** where NCCL Inspector records are read",
        "   (analysis.evidence.collectives, collectors.nccl). Every rank leaves a collective at about",
        "   the same time, once the last has arrived (NVIDIA/nccl#460), and Inspector times each",
        "   collective by its kernels, waits included: a rank's mean time over the shortest of its",
        "   communicator's ranks on the node is its wait for the last one. Where that wait is most of",
        "   its collective time, its resident instants are sync and the last rank is the straggler;",
        "   where it is not (a large message is long on every rank alike), the host's sync inference",
        "   for those instants is dropped. A communicator spanning nodes whose transfer (the waits",
        "   taken out) runs under half of the GPU's share of its nearest NICs' rate while their ports",
        "   carry bytes through most of its collective time is network; a late rank on another node",
        "   leaves the ports quiet, small messages leave them at noise, and a full-speed transfer is",
        "   left to the link evidence. The recent instants are judged on the recent reads' timing",
        "   (`verdict.short-window`). Without Inspector records the host's evidence stands alone.",
        "7. **Short window raises, long window confirms**: the verdict over the whole window, unless",
        "   over the last `verdict.short-window` seconds another wait dominates the idle time (an",
        "   onset); a change is published once two consecutive passes (`verdict.interval`) agree, and",
        "   `gpuwait_gpu_verdict_age_seconds` says since when it holds. The short window judges links",
        "   on its own instants (burst level, correlation): a fabric that congests carries the same",
        "   collective at a fraction of the healthy past's peak. Clock limits are raised from it as",
        "   they are: the driver reports them itself, per sample.",
        "",
        "Idle time no evidence explains is `insufficient_work` when the owner is active (IO waits, a",
        "loop reporting work, or CPU use beyond spin-waiting on its own running kernels of at least",
        "`verdict.demand.idle-cores` per idle GPU: a server asleep between requests still spins a core",
        "through each kernel, CUDA's default schedule), else `none` (A1, A13); the part of it a kernel",
        "was resident for is `insufficient_work` whatever the demand (A4). A GPU idle less than `verdict.min-idle-ratio`",
        "of the window is computing: its verdict is `throttled` when power or thermal limits held its",
        "clocks during `verdict.min-throttled-share` of its busy time, else `none`. Otherwise the cause",
        "with the largest share is named when it explains at least `verdict.min-cause-share` of the idle",
        "time. How the verdict fares on node traces written apart from it: docs/evaluation.md.",
        "",
        *TIME_TO_VERDICT,
        "",
        "## Scenarios",
        "",
        "| scenario | expected | produced (affected GPUs) | node | idle | main wait share | dip period s | aligned links | straggler |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, outcome in outcomes.items():
        affected = outcome.affected()
        first = affected[0] if affected else None
        idle = first.attribution.idle_ratio if first else None
        share = first.attribution.wait_ratio.get(first.verdict) if first and first.verdict != "none" else None
        aligned = sorted({f"{link.link} ({link.link_layer or link.kind})" for g in affected for link in g.links if link.aligned})
        stragglers = [g.index for g in outcome.result.gpus if g.straggler]
        lines.append(
            f"| `{name}` | `{outcome.scenario.expected}` | {outcome.produced()} | `{outcome.result.verdict}` | {_fmt(idle)} | "
            f"{_fmt(share)} | {_fmt(first.dip_period_seconds if first else None)} | {', '.join(aligned) or '-'} | "
            f"{', '.join('GPU ' + s for s in stragglers) or '-'} |"
        )
    lines += ["", "Descriptions:", ""]
    lines += [f"- `{name}`: {o.scenario.description}" for name, o in outcomes.items()]
    lines += ["", "## Confusion table", "", "Rows: expected verdict; columns: verdict produced, counted over the affected GPUs of every scenario.", ""]
    matrix: Counter[tuple[str, str]] = Counter()
    for o in outcomes.values():
        for g in o.affected():
            matrix[(o.scenario.expected, g.verdict)] += 1
    lines.append("| expected \\ produced | " + " | ".join(f"`{c}`" for c in CAUSES) + " |")
    lines.append("|---" * (len(CAUSES) + 1) + "|")
    for expected in CAUSES:
        if any(matrix[(expected, c)] for c in CAUSES):
            lines.append(f"| `{expected}` | " + " | ".join(str(matrix[(expected, c)] or "") for c in CAUSES) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(render(run_all()))


if __name__ == "__main__":
    main()
