"""Builds the evaluation traces and their truths.

    python3 -m evaluation.generate --out DIR [--only NAME,...] [--kind steady|onset] [--seed N] [--v1] [--jobs N] [--list]

Each scenario gives DIR/NAME.jsonl.gz (a gpuwait trace) and DIR/NAME.truth.json. ``--v1``
leaves out the sources of trace format version 2 (owner_cgroup, nccl) and writes version-1
traces that today's reader accepts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

from evaluation.record import Recorder
from evaluation.scenarios import Scenario, select
from evaluation.truth import WINDOW, Meter, citations

#: model time run before recording starts, so queues, prefetch and temperatures settle
WARMUP = 10.0


def generate(scenario: Scenario, out_dir: str, seed: int = 1, v1: bool = False) -> dict:
    built = scenario.build(seed)
    node = built.node
    end = WARMUP + scenario.duration
    if scenario.kind == "onset":
        onset = WARMUP + scenario.onset
        windows = [("before", onset - WINDOW, onset), ("after", end - WINDOW, end)]
        if built.onset_action is not None:
            node.at(onset, built.onset_action)
    else:
        windows = [("scored", end - WINDOW, end)]
    has_v2 = (not v1) and (any(o.gpu_processes for o in node.owners))
    version = 2 if has_v2 else 1
    os.makedirs(out_dir, exist_ok=True)
    trace = os.path.join(out_dir, f"{scenario.name}.jsonl.gz")
    recorder = Recorder(node, trace, scenario.name, seed, version, start=WARMUP)
    meter = Meter(node, windows)
    while node.t < end - 1e-9:
        node.step()
        if node.t >= WARMUP:
            recorder.poll()
        meter.observe()
    recorder.close()
    origin = recorder.origin

    def trace_time(t: float) -> float:
        return round(t - origin, 3)

    owner_of = {}
    for o in node.owners:
        for p in o.gpu_processes:
            for g in node.gpus:
                if p.pid in g.processes:
                    owner_of.setdefault(g.index, o.id)
    truth = {
        "scenario": scenario.name, "title": scenario.title, "kind": scenario.kind, "family": scenario.family,
        "story": scenario.story, "seed": seed, "trace": os.path.basename(trace), "trace_version": version,
        "host": node.hostname, "cores": node.cpu.n, "gpu_model": node.gpus[0].spec.name if node.gpus else "",
        "duration_seconds": scenario.duration, "claims": list(scenario.claims),
        "windows": {w.name: [trace_time(w.start), trace_time(w.end)] for w in meter.windows},
        "feeders": {w.name: meter.feeders(w) for w in meter.windows},
        "evidence": {w.name: meter.cgroups(w) for w in meter.windows},
    }
    if scenario.kind == "onset":
        truth["onset_seconds"] = trace_time(WARMUP + scenario.onset)
    gpus = []
    for g in node.gpus:
        entry = {"gpu": g.index, "uuid": g.uuid, "owner": owner_of.get(g.index, "")}
        if scenario.kind == "onset":
            for label, table, w in (("before", built.before, meter.windows[0]), ("after", built.truth, meter.windows[1])):
                gt = table[g.index]
                entry[label] = _entry(gt, meter.physics(w, g.index))
        else:
            entry.update(_entry(built.truth[g.index], meter.physics(meter.windows[0], g.index)))
        gpus.append(entry)
    truth["gpus"] = gpus
    with open(os.path.join(out_dir, f"{scenario.name}.truth.json"), "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
        f.write("\n")
    return truth


def _entry(gt, physics: dict) -> dict:
    return {"expected": gt.expected, "expected_v1": gt.expected_v1 or gt.expected,
            "collective_stalled": gt.collective_stalled, "reason": gt.reason, "citations": citations(gt.cites),
            "physics": physics}


def _one(args: tuple[str, str, int, bool]) -> str:
    name, out, seed, v1 = args
    scenario = select(name)[0]
    generate(scenario, out, seed, v1)
    return name


def generate_all(scenarios: list[Scenario], out: str, seed: int, v1: bool, jobs: int = 1) -> list[str]:
    work = [(s.name, out, seed, v1) for s in scenarios]
    if jobs <= 1 or len(work) <= 1:
        return [_one(w) for w in work]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_one, work))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluation.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="evaluation-out")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--kind", choices=("steady", "onset"), default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--v1", action="store_true", help="version-1 traces: leave out owner_cgroup and nccl")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    try:
        scenarios = select(args.only or None, args.kind)
    except KeyError as e:
        print(f"evaluation.generate: {e.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for s in scenarios:
            print(f"{s.name:34s} {s.kind:6s} {s.title}")
        return 0
    for name in generate_all(scenarios, args.out, args.seed, args.v1, args.jobs):
        print(f"{args.out}/{name}.jsonl.gz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
