"""Builds the evaluation traces and their truths.

    python3 -m evaluation.generate --out DIR [--scenario NAME,...] [--kind steady|onset] [--seed N] [--jobs N] [--list]

Each scenario gives DIR/NAME.jsonl.gz (a gpuwait trace) and DIR/NAME.truth.json. The traces
hold the sources that the gpuwait trace reader importable here knows, so a trace is always
one this checkout can replay (run with this checkout's exporter/ on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

from evaluation.exporter import VERSION_1, TraceFormat, installed_format
from evaluation.record import Recorder
from evaluation.scenarios import WARMUP, Scenario, check_failures, select
from evaluation.truth import WINDOW, Meter, citations


def generate(scenario: Scenario, out_dir: str, seed: int = 1, fmt: TraceFormat = VERSION_1,
             duration: float | None = None, onset: float | None = None) -> dict:
    """Runs ``scenario`` and writes its trace and truth into ``out_dir``. ``duration`` and
    ``onset`` (seconds of trace) shorten a run, for tests; the scored windows then shrink to
    fit."""
    duration = scenario.duration if duration is None else duration
    built = scenario.build(seed)
    node = built.node
    end = WARMUP + duration
    if scenario.kind == "onset":
        at = WARMUP + (scenario.onset if onset is None else onset)
        if not WARMUP < at < end:
            raise ValueError(f"{scenario.name}: onset {at - WARMUP} s is outside the {duration} s trace")
        windows = [("before", at - min(WINDOW, at - WARMUP), at), ("after", end - min(WINDOW, end - at), end)]
        if built.onset_action is not None:
            node.at(at, built.onset_action)
    else:
        windows = [("scored", end - min(WINDOW, duration), end)]
    os.makedirs(out_dir, exist_ok=True)
    trace = os.path.join(out_dir, f"{scenario.name}.jsonl.gz")
    recorder = Recorder(node, trace, scenario.name, seed, fmt, start=WARMUP)
    meter = Meter(node, windows, onset=at if scenario.kind == "onset" else None)
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
        "story": scenario.story, "seed": seed, "trace": os.path.basename(trace), "trace_format": fmt.key,
        "trace_version": fmt.version, "sources": list(recorder.sources),
        "host": node.hostname, "cores": node.cpu.n, "gpu_model": node.gpus[0].spec.name if node.gpus else "",
        "duration_seconds": duration, "claims": list(scenario.claims),
        "windows": {w.name: [trace_time(w.start), trace_time(w.end)] for w in meter.windows},
        "feeders": {w.name: meter.feeders(w) for w in meter.windows},
        "evidence": {w.name: meter.cgroups(w) for w in meter.windows},
    }
    if scenario.kind == "onset":
        truth["onset_seconds"] = trace_time(at)
    gpus = []
    for g in node.gpus:
        entry = {"gpu": g.index, "uuid": g.uuid, "owner": owner_of.get(g.index, "")}
        if scenario.kind == "onset":
            for label, table, w in (("before", built.before, meter.windows[0]), ("after", built.truth, meter.windows[1])):
                entry[label] = _entry(table[g.index], meter.physics(w, g.index))
            entry["impact_seconds"] = meter.impact(g.index, entry["before"]["physics"], entry["after"]["physics"])
        else:
            entry.update(_entry(built.truth[g.index], meter.physics(meter.windows[0], g.index)))
        gpus.append(entry)
    truth["gpus"] = gpus
    # The physics each truth's argument rests on, measured on the model: a failure means the
    # model did not do what the argument says, and the scorer reports it.
    truth["physics_failures"] = check_failures(scenario, truth) if duration == scenario.duration else []
    # written whole or not at all: a truth file is what marks a scenario as generated
    path = os.path.join(out_dir, f"{scenario.name}.truth.json")
    with open(path + ".part", "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(path + ".part", path)
    return truth


def _entry(gt, physics: dict) -> dict:
    return {"expected": gt.expected, "collective_stalled": gt.collective_stalled, "reason": gt.reason,
            "citations": citations(gt.cites), "physics": physics}


def _one(args: tuple[str, str, int, TraceFormat]) -> str:
    name, out, seed, fmt = args
    truth = generate(select(name)[0], out, seed, fmt)
    for failure in truth["physics_failures"]:
        print(f"evaluation.generate: physics check failed: {failure}", file=sys.stderr)
    return name


def generate_all(scenarios: list[Scenario], out: str, seed: int, fmt: TraceFormat, jobs: int = 1) -> list[str]:
    work = [(s.name, out, seed, fmt) for s in scenarios]
    if jobs <= 1 or len(work) <= 1:
        return [_one(w) for w in work]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_one, work))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluation.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="evaluation-out")
    parser.add_argument("--scenario", default="", help="comma-separated scenario names")
    parser.add_argument("--kind", choices=("steady", "onset"), default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    try:
        scenarios = select(args.scenario or None, args.kind)
    except KeyError as e:
        print(f"evaluation.generate: {e.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for s in scenarios:
            print(f"{s.name:36s} {s.kind:6s} {s.title}")
        return 0
    for name in generate_all(scenarios, args.out, args.seed, installed_format(), args.jobs):
        print(f"{args.out}/{name}.jsonl.gz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
