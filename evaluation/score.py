"""Scores gpuwait's verdict on the evaluation set.

    python3 -m evaluation.score [--jobs N] [--scenario NAME,...] [--seed N] [--json OUT] [--without SOURCE,...]

Generates the traces (kept in evaluation.cache's folder, so a second run only replays them),
then for each steady scenario runs ``gpuwait diagnose --trace FILE --json`` of this checkout
and compares every GPU's verdict with its truth; each onset scenario is replayed through the
same sampler and analysis with the verdict read after every pass, which gives its verdict at
the end of the trace and how long after the onset the right one came. Prints per scenario
the GPUs right and the misses, the confusion table (rows: the truth, columns: the verdict),
the share of GPUs right, the false waits (a GPU whose truth is none given a cause), and for
the onsets the delay from the onset to the right verdict (median, p90, share within 15 s).
It asserts nothing: the figures are the result.

``--without nccl`` replays copies of the traces with that source's readings left out (kept
beside the traces, in a folder named after the sources dropped): the same node, as an
exporter that cannot read it would see it. The model and the truths are unchanged.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from evaluation import exporter
from evaluation.cache import cache_dir, missing
from evaluation.generate import generate_all
from evaluation.onsets import PROMPT_SECONDS, Followed, delays, fmt_seconds, follow
from evaluation.scenarios import Scenario, select
from evaluation.truth import VERDICTS, accepted


def prepare(scenarios: list[Scenario], seed: int, jobs: int) -> str:
    """The folder holding every scenario's trace and truth, generating those not there yet."""
    fmt = exporter.installed_format()
    out = cache_dir(seed, fmt.key)
    todo = missing(out, [s.name for s in scenarios])
    if todo:
        print(f"generating {len(todo)} trace(s) into {out}", file=sys.stderr)
        generate_all([s for s in scenarios if s.name in todo], out, seed, fmt, jobs)
    return out


def without(out: str, names: list[str], dropped: frozenset[str]) -> str:
    """A folder beside ``out`` with the traces of ``names`` minus the readings of the sources
    ``dropped``, and their truths; copies already there are kept."""
    folder = f"{out}-without-{'+'.join(sorted(dropped))}"
    os.makedirs(folder, exist_ok=True)
    for name in names:
        trace, truth = os.path.join(folder, f"{name}.jsonl.gz"), os.path.join(folder, f"{name}.truth.json")
        if os.path.exists(truth) and os.path.exists(trace):
            continue
        partial = trace + ".partial"
        with gzip.open(os.path.join(out, f"{name}.jsonl.gz"), "rt", encoding="utf-8") as src, \
                gzip.open(partial, "wt", encoding="utf-8", compresslevel=5) as dst:
            for line in src:
                # The header has no source: it is kept.
                if json.loads(line).get("source") not in dropped:
                    dst.write(line)
        os.replace(partial, trace)
        with open(os.path.join(out, f"{name}.truth.json")) as f, open(truth + ".partial", "w") as g:
            g.write(f.read())
        os.replace(truth + ".partial", truth)
    return folder


def run_one(task: tuple[str, str, str]) -> dict:
    """One scenario through the exporter: final verdicts, and for an onset the series."""
    kind, out, name = task
    trace = os.path.join(out, f"{name}.jsonl.gz")
    if kind == "steady":
        diagnosis = exporter.diagnose(trace)
        if "error" in diagnosis:
            return {"error": diagnosis["error"]}
        return {"final": exporter.verdicts(diagnosis)}
    try:
        series = exporter.verdict_series(trace)
    except ValueError as e:
        return {"error": str(e)}
    return {"final": {gpu: s[-1][1] for gpu, s in series.items() if s}, "series": series}


def is_false_wait(expected: str, verdict: str) -> bool:
    return "none" in expected.split("|") and verdict != "none" and not accepted(expected, verdict)


class Tally:
    def __init__(self) -> None:
        self.right = self.total = self.false_waits = self.none_truths = 0
        self.confusion: dict[str, dict[str, int]] = {}

    def add(self, expected: str, verdict: str, confusion: bool = True) -> bool:
        good = accepted(expected, verdict)
        self.right += good
        self.total += 1
        self.none_truths += "none" in expected.split("|")
        self.false_waits += is_false_wait(expected, verdict)
        if confusion:
            row = self.confusion.setdefault(expected, {})
            row[verdict] = row.get(verdict, 0) + 1
        return good

    def to_json(self) -> dict:
        return {"right": self.right, "gpus": self.total, "right_share": self.right / self.total if self.total else None,
                "false_waits": self.false_waits, "none_truths": self.none_truths}


def score(scenarios: list[Scenario], truths: dict[str, dict], results: dict[str, dict]) -> dict:
    rows = []
    overall, steady, onset_end, before = Tally(), Tally(), Tally(), Tally()
    followed: list[Followed] = []
    for s in scenarios:
        truth, result = truths[s.name], results[s.name]
        row = {"scenario": s.name, "kind": s.kind, "gpus": len(truth["gpus"]), "right": 0, "misses": [],
               "physics_failures": truth.get("physics_failures", [])}
        if "error" in result:
            row["error"] = result["error"]
        final = result.get("final", {})
        for g in truth["gpus"]:
            gpu = g["gpu"]
            expected = g["after"]["expected"] if s.kind == "onset" else g["expected"]
            got = final.get(gpu, "missing")
            good = overall.add(expected, got)
            (onset_end if s.kind == "onset" else steady).add(expected, got, confusion=False)
            row["right"] += good
            if not good:
                row["misses"].append(f"GPU{gpu} {expected}->{got}")
            if s.kind == "onset" and "series" in result:
                f = follow(gpu, result["series"].get(gpu, []), truth["onset_seconds"], g["before"]["expected"], expected,
                           g.get("impact_seconds", 0.0))
                before.add(f.before, f.at_onset or "missing", confusion=False)
                followed.append(f)
                row.setdefault("onset", []).append(f.to_json())
        rows.append(row)
    return {"rows": rows, "confusion": overall.confusion, "all": overall.to_json(), "steady": steady.to_json(),
            "onset_end": onset_end.to_json(), "onset_before": before.to_json(),
            "time_to_right_verdict": delays(followed, "first_right"),
            "time_to_settled_verdict": delays(followed, "settled"),
            "time_from_impact_to_right_verdict": delays(followed, "first_right_after_impact"),
            "time_from_impact_to_settled_verdict": delays(followed, "settled_after_impact")}


SHORT = {"data_pipeline": "data", "storage": "storage", "host_transfer": "h2d", "network": "network", "sync": "sync",
         "insufficient_work": "insuff", "throttled": "thrott", "none": "none"}


def render(summary: dict) -> str:
    lines = [f"{'scenario':36s} {'kind':6s} {'right':>7s}  misses"]
    for r in summary["rows"]:
        note = ("cannot replay: " + r["error"]) if "error" in r else ", ".join(r["misses"])
        lines.append(f"{r['scenario']:36s} {r['kind']:6s} {r['right']:>3d}/{r['gpus']:<3d}  {note}")
        for failure in r["physics_failures"]:
            lines.append(f"{'':44s}  physics check failed: {failure}")
    confusion = summary["confusion"]
    produced = {v for row in confusion.values() for v in row}
    cols = [v for v in VERDICTS if v in produced] + sorted(produced - set(VERDICTS))
    lines += ["", "confusion (rows: truth, a|b accepting either; columns: verdict)",
              f"{'':28s}" + "".join(f"{SHORT.get(c, c)[:7]:>8s}" for c in cols)]
    order = {v: i for i, v in enumerate(VERDICTS)}
    for expected in sorted(confusion, key=lambda e: (order.get(e.split("|")[0], 99), e)):
        cells = confusion[expected]
        lines.append(f"{expected:28s}" + "".join(f"{cells.get(c, 0) or '.':>8}" for c in cols))
    a, st, oe, ob = summary["all"], summary["steady"], summary["onset_end"], summary["onset_before"]
    ttv, settled = summary["time_to_right_verdict"], summary["time_to_settled_verdict"]
    hit, hit_settled = summary["time_from_impact_to_right_verdict"], summary["time_from_impact_to_settled_verdict"]

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"
    lines += [
        "",
        f"GPUs right: {a['right']}/{a['gpus']} ({pct(a['right_share'])}); steady {st['right']}/{st['gpus']}, "
        f"onset scenarios at the end of the trace {oe['right']}/{oe['gpus']}",
        f"false waits: {a['false_waits']} of {a['none_truths']} GPUs whose truth is none were given a cause",
        f"onset scenarios before the onset: {ob['right']}/{ob['gpus']} right, {ob['false_waits']} false waits",
        f"time from onset to the right verdict ({ttv['gpus']} GPUs whose truth changes): median "
        f"{fmt_seconds(ttv['median_seconds'])}, p90 {fmt_seconds(ttv['p90_seconds'])}, "
        f"within {PROMPT_SECONDS:.0f} s {pct(ttv['within_share'])}, never {ttv['never']}",
        f"time from onset to the settled verdict: median {fmt_seconds(settled['median_seconds'])}, "
        f"p90 {fmt_seconds(settled['p90_seconds'])}, within {PROMPT_SECONDS:.0f} s {pct(settled['within_share'])}",
        f"the same from the GPU's first affected second: right median {fmt_seconds(hit['median_seconds'])}, "
        f"p90 {fmt_seconds(hit['p90_seconds'])}, within {PROMPT_SECONDS:.0f} s {pct(hit['within_share'])}; settled "
        f"median {fmt_seconds(hit_settled['median_seconds'])}, p90 {fmt_seconds(hit_settled['p90_seconds'])}, "
        f"within {PROMPT_SECONDS:.0f} s {pct(hit_settled['within_share'])}",
    ]
    return "\n".join(lines)


def evaluate(scenarios: list[Scenario], seed: int = 1, jobs: int = 1, dropped: frozenset[str] = frozenset()) -> dict:
    out = prepare(scenarios, seed, jobs)
    if dropped:
        out = without(out, [s.name for s in scenarios], dropped)
    truths = {}
    for s in scenarios:
        with open(os.path.join(out, f"{s.name}.truth.json")) as f:
            truths[s.name] = json.load(f)
    # the longest first, so that two workers finish together
    tasks = sorted(((s.kind, out, s.name) for s in scenarios), key=lambda t: -truths[t[2]]["duration_seconds"])
    if jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = dict(zip((t[2] for t in tasks), pool.map(run_one, tasks)))
    else:
        done = {t[2]: run_one(t) for t in tasks}
    summary = score(scenarios, truths, done)
    summary["traces"] = out
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluation.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="scenarios generated and replayed at once (default 1)")
    parser.add_argument("--scenario", default="", metavar="NAME,...", help="only these scenarios")
    parser.add_argument("--seed", type=int, default=1, help="the model's seed (default 1)")
    parser.add_argument("--json", default="", metavar="OUT", help="also write the whole result as JSON to OUT")
    parser.add_argument("--without", default="", metavar="SOURCE,...",
                        help="replay the traces with these sources' readings left out (e.g. nccl)")
    args = parser.parse_args(argv)
    try:
        scenarios = select(args.scenario or None)
    except KeyError as e:
        print(f"evaluation.score: {e.args[0]}", file=sys.stderr)
        return 2
    started = time.monotonic()
    dropped = frozenset(x for x in args.without.split(",") if x)
    summary = evaluate(scenarios, args.seed, max(1, args.jobs), dropped)
    summary["without"] = sorted(dropped)
    summary["seconds"] = round(time.monotonic() - started, 1)
    print(render(summary))
    print(f"({len(scenarios)} scenarios in {summary['seconds']:.0f} s; traces in {summary['traces']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
