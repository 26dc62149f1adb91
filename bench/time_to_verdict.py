"""How fast the verdict follows a change: on the evaluation set's onset scenarios, the time
from the instant a mechanism begins to the first verdict its truth accepts, and to the verdict
that then holds to the end of the trace; and the same counted from the GPU's impact, the
first second the model shows the GPU waiting more (or computing at reduced clocks) than
before the onset, which comes later where a buffer stands between the mechanism and the GPU
(a data loader's prepared batches).

    python3 bench/time_to_verdict.py [--jobs 2] [--scenario NAME,...] [--seed N] [--json OUT]

The traces are the evaluation set's (python3 -m evaluation.score builds and caches the same
ones). Each is replayed through this checkout's sampler and analysis at the trace's own
analysis times, and every GPU's verdict is read after every pass (once per second of trace).
Printed per GPU: the verdict at the onset against the truth before it, the delays, and the
wrong verdicts given after the onset; per cause after the onset, the median and p90 delays
and the share within 15 s; and each delay as a ratio to the analysis window, the reference a
verdict over a window of the new state is bounded by. GPUs whose truth does not change (the
look-alikes and the bystanders) count the passes after the onset that gave them something
their truth does not accept. Trace time, not wall time: the figures do not depend on the
machine. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from concurrent.futures import ProcessPoolExecutor

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))
sys.path.insert(0, str(REPO))

from evaluation import exporter  # noqa: E402
from evaluation.onsets import PROMPT_SECONDS, Followed, delays, fmt_seconds, follow  # noqa: E402
from evaluation.scenarios import select  # noqa: E402
from evaluation.score import prepare  # noqa: E402


def run_one(task: tuple[str, str]) -> dict:
    out, name = task
    with open(os.path.join(out, f"{name}.truth.json")) as f:
        truth = json.load(f)
    try:
        series = exporter.verdict_series(os.path.join(out, f"{name}.jsonl.gz"))
    except ValueError as e:
        return {"scenario": name, "error": str(e)}
    onset = truth["onset_seconds"]
    rows = [follow(g["gpu"], series.get(g["gpu"], []), onset, g["before"]["expected"], g["after"]["expected"],
                   g.get("impact_seconds", 0.0))
            for g in truth["gpus"]]
    return {"scenario": name, "onset": onset, "window": truth["windows"]["after"], "gpus": [r.to_json() for r in rows]}


def followed_of(result: dict) -> list[Followed]:
    out = []
    for g in result.get("gpus", []):
        g = {k: v for k, v in g.items() if k != "changes"}
        out.append(Followed(**g))
    return out


def render(results: list[dict], window: float) -> tuple[str, dict]:
    lines = [f"{'scenario':30s} {'gpu':>3s} {'at onset':>20s} {'truth after':>20s} {'impact':>6s} {'first':>6s} "
             f"{'settled':>7s}  wrong verdicts after the onset (passes)"]
    every: list[Followed] = []
    by_cause: dict[str, list[Followed]] = {}
    bystanders = {"gpus": 0, "wrong_passes": 0}
    for r in results:
        if "error" in r:
            lines.append(f"{r['scenario']:30s}  cannot replay: {r['error']}")
            continue
        for f in followed_of(r):
            every.append(f)
            mark = "" if f.before_right else " (x)"
            wrong = ", ".join(f"{v} {n}" for v, n in sorted(f.wrong_after.items()))
            lines.append(f"{r['scenario']:30s} {f.gpu:>3d} {(f.at_onset or '-') + mark:>20s} {f.after:>20s} "
                         f"{fmt_seconds(f.impact) if f.changes else '':>6s} "
                         f"{fmt_seconds(f.first_right) if f.changes else '':>6s} "
                         f"{fmt_seconds(f.settled) if f.changes else '':>7s}  {wrong}")
            if f.changes:
                by_cause.setdefault(f.after, []).append(f)
            else:
                bystanders["gpus"] += 1
                bystanders["wrong_passes"] += sum(f.wrong_after.values())

    def ratio(x):
        return "-" if x is None else f"{x / window:.2f}"

    def share(d):
        return "-" if d["within_share"] is None else f"{100 * d['within_share']:.0f}%"
    per_cause: dict[str, dict] = {}
    for since, first_key, settled_key in (("the onset", "first_right", "settled"),
                                          ("the impact", "first_right_after_impact", "settled_after_impact")):
        lines += ["", f"{'counted from ' + since:24s} {'gpus':>5s} {'never':>6s} {'first med':>10s} {'p90':>7s} "
                      f"{'<=' + str(int(PROMPT_SECONDS)) + ' s':>7s} {'settled med':>12s} {'p90':>7s} "
                      f"{'<=' + str(int(PROMPT_SECONDS)) + ' s':>7s} {'med/window':>11s}"]
        for cause, rows in sorted(by_cause.items()) + [("all", [f for f in every if f.changes])]:
            first, settled = delays(rows, first_key), delays(rows, settled_key)
            per_cause.setdefault(cause, {}).update({first_key: first, settled_key: settled})
            lines.append(f"{cause:24s} {first['gpus']:>5d} {first['never']:>6d} "
                         f"{fmt_seconds(first['median_seconds']):>10s} {fmt_seconds(first['p90_seconds']):>7s} "
                         f"{share(first):>7s} {fmt_seconds(settled['median_seconds']):>12s} "
                         f"{fmt_seconds(settled['p90_seconds']):>7s} {share(settled):>7s} "
                         f"{ratio(first['median_seconds']):>11s}")
    lines.append(f"GPUs whose truth does not change: {bystanders['gpus']}, wrong verdicts after the onset: "
                 f"{bystanders['wrong_passes']} passes")
    lines.append(f"reference: analysis window {window:.0f} s")
    return "\n".join(lines), {"per_cause": per_cause, "unchanged_truths": bystanders, "analysis_window_seconds": window}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 bench/time_to_verdict.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--scenario", default="", metavar="NAME,...")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default="", metavar="OUT")
    args = parser.parse_args(argv)
    try:
        scenarios = select(args.scenario or None, "onset")
    except KeyError as e:
        print(f"time_to_verdict: {e.args[0]}", file=sys.stderr)
        return 2
    if not scenarios:
        print("time_to_verdict: no onset scenario selected", file=sys.stderr)
        return 2
    jobs = max(1, args.jobs)
    out = prepare(scenarios, args.seed, jobs)
    tasks = [(out, s.name) for s in scenarios]
    if jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(run_one, tasks))
    else:
        results = [run_one(t) for t in tasks]
    window = exporter.analysis_window()
    text, summary = render(results, window)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**summary, "traces": out, "scenarios": results}, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
