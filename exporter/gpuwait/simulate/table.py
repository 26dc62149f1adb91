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
        "How a verdict is reached (A14): the GPU's activity (GPM SM activity where the GPU has it,",
        "else the driver's utilization samples) is put on one grid with every host signal. An idle",
        "sample is given to the first cause whose evidence is present at that instant:",
        "",
        "| cause | evidence at the idle instant |",
        "|---|---|",
        "| `storage` | reads in flight (disk reads or NFS read-path operations at `verdict.storage.min-read-iops` or more) and tasks stalled on IO (PSI io some), a long disk queue, or slow NFS operations; writes alone never count, so a checkpoint is not a data-pipeline wait |",
        "| `data_pipeline` | a core saturated within the sampling interval while the GPU's owner uses at least `verdict.cpu.owner-cores` cores (A2, A3: the average hides it) |",
        "| `host_transfer` | the GPU's PCIe traffic at `verdict.pcie.share` of its link's current capacity (a downtrained link lowers it) |",
        "| `sync` | a peer GPU of the same owner still computing (A12) |",
        "| `network` | a NIC or RDMA port in a burst, on a link whose traffic moves against the GPU's activity over the window (correlation at or below -`verdict.network.anticorrelation`, A10) |",
        "| `insufficient_work` | none of the above, and the owner is active (A4) |",
        "| `none` | idle without demand: no owner, or an owner neither using CPU nor waiting on IO (A1) |",
        "",
        "A GPU idle less than `verdict.min-idle-ratio` of the window is computing: its verdict is",
        "`throttled` when power or thermal limits held its clocks during `verdict.min-throttled-share`",
        "of its busy samples, else `none`. Otherwise the cause with the largest share is named when it",
        "explains at least `verdict.min-cause-share` of the idle time.",
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
