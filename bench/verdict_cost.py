"""Cost of the window analysis and verdict on a big simulated node, against the sampler's budget.

    python3 bench/verdict_cost.py [--gpus 8] [--nics 16] [--cores 32] [--repeat 20]

Runs a simulated node (every source, the verdict included) for one full window in virtual time,
then times repeated analysis passes over that full window. Figures are printed in milliseconds
and as ratios against a reference measured in the same run (one pass of plain Python over the
same number of window values), so that a noisy machine still gives comparable numbers. Also
prints what importing numpy would cost this process, the alternative considered for the maths.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import time


from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.registry import resolve
from gpuwait.simulate.model import SCENARIOS, Topology
from gpuwait.simulate.run import run_virtual


def reference_pass(sampler) -> float:
    """Touch every value of every window once: the floor any analysis pays."""
    started = time.perf_counter()
    total = 0.0
    for state in sampler.states.values():
        if state.ring is None:
            continue
        view = state.ring.view()
        for column in view.columns.values():
            for v in column:
                if v == v:
                    total += v
    return time.perf_counter() - started


def numpy_cost() -> tuple[float, float]:
    code = (
        "import time\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
        "r0 = rss(); t = time.perf_counter()\n"
        "import numpy\n"
        "print(time.perf_counter() - t, rss() - r0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]) / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="network_allreduce")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--nics", type=int, default=16)
    ap.add_argument("--rdma", type=int, default=8)
    ap.add_argument("--cores", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    settings, _ = resolve([])
    topology = Topology(nics=tuple(f"eth{i}" for i in range(args.nics)), rdma_devices=tuple(f"mlx5_{i}" for i in range(args.rdma)))
    scenario = dataclasses.replace(SCENARIOS[args.scenario], topology=topology).with_params(gpus=args.gpus, cores=args.cores)
    sampler = run_virtual(scenario, settings, settings.analysis_window + 1.0)
    end = settings.analysis_window + 1.0
    # Time every pass's full work: the verdict's own schedule would skip it on most passes.
    verdict_spec = next(c for c in sampler.collectors if c.name == "verdict")
    sampler.collectors = [dataclasses.replace(c, analyse_every=None) if c is verdict_spec else c for c in sampler.collectors]

    passes, verdicts, references = [], [], []
    for _ in range(args.repeat):
        references.append(reference_pass(sampler))
        t0 = time.perf_counter()
        sampler.analyse_once(now=end)
        # The summaries no analysis reads are made when a scrape asks: as if one came after every pass.
        sampler.summarize_due()
        passes.append(time.perf_counter() - t0)
    # The verdict alone, from the same inputs the pass hands it.
    views = {n: s.ring.view(since=end - settings.analysis_window) for n, s in sampler.states.items() if s.ring is not None}
    inputs = AnalysisInputs(views, {n: s.stats for n, s in sampler.states.items()}, {n: s.latest for n, s in sampler.states.items() if s.latest}, end)
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        verdict_spec.analyse(inputs, settings)
        verdicts.append(time.perf_counter() - t0)

    values = sum(len(c) for s in sampler.states.values() if s.ring is not None for c in s.ring.view().columns.values())
    med = statistics.median
    every = {"verdict alone": settings["verdict.interval"]}
    print(f"node: {args.gpus} GPUs, {args.nics} NICs, {args.rdma} RDMA ports, {args.cores} cores; window {settings.analysis_window:g}s at {settings.sample_interval * 1000:g} ms; {values} window values")
    print(f"{'':30s}{'median ms':>10s}{'p90 ms':>10s}{'x reference':>13s}{'runs every':>12s}{'core share':>12s}")
    for name, xs in (("reference (touch every value)", references), ("window summaries, each pass", [max(0.0, p - v) for p, v in zip(passes, verdicts)]), ("verdict alone", verdicts)):
        xs = sorted(xs)
        p90 = xs[int(0.9 * (len(xs) - 1))]
        interval = every.get(name, settings["analysis.interval"])
        print(f"{name:30s}{med(xs) * 1000:10.1f}{p90 * 1000:10.1f}{med(xs) / med(references):13.1f}{interval:11g}s{med(xs) / interval:11.1%}")
    seconds, mib = numpy_cost()
    print(f"numpy (not used): import {seconds * 1000:.0f} ms, +{mib:.1f} MiB RSS in a fresh interpreter")


if __name__ == "__main__":
    main()
