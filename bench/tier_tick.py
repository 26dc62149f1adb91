"""What the fast tier costs as the sampler runs it: every source of the tier read in turn, then
a sleep until the next tick, as the tier's thread does live, and the reads decoded and folded
into the rings once per analysis interval, as each analysis pass does first.

    python3 bench/bignode.py build BIG --size big
    python3 bench/tier_tick.py --tree BIG [--ticks 150] [--repeats 2] [--no-collector.gpu]
    PYTHONPATH=tests/support/nvml_double GPUWAIT_NVML_DOUBLE=BIG/gpus.yaml python3 bench/tier_tick.py --tree BIG

``bench/sampler_tick.py`` times each step on its own, the same call again and again (the
median of hot repeats). A live tick runs every source once after 100 ms asleep, beside the
other threads, so its caches are cold and its allocations feed the collector: this gives the
mean CPU of such ticks, per source (read: what the tier's thread does; settle: the decoding,
the columns and the ring appends, per tick), in the reading thread, and the whole process's
CPU per tick, which counts the threads a read hands work to (the GPUs' NVML workers). The
rings are filled first, so appends overwrite as they do live. Paced ticks are compared with ticks run back to back in the same run, which tells how
much of a tick the sleep costs. Run ``bench/bignode.py write BIG`` beside it for counters that
move. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))

from gpuwait.cli import enabled_collectors  # noqa: E402
from gpuwait.core.config import ANALYSIS_INTERVAL  # noqa: E402
from gpuwait.core.registry import resolve  # noqa: E402
from gpuwait.core.sampler import Sampler  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=pathlib.Path, required=True, help="a bench/bignode.py tree")
    ap.add_argument("--ticks", type=int, default=150, help="ticks per measurement (default 150)")
    ap.add_argument("--repeats", type=int, default=2, help="measurements of each kind, alternating (default 2)")
    args, exporter_args = ap.parse_known_args()
    settings, _ = resolve([f"--path.procfs={args.tree / 'proc'}", f"--path.sysfs={args.tree / 'sys'}",
                           *exporter_args])
    sampler = Sampler(enabled_collectors(settings), settings)
    interval = settings.sample_interval
    tier = [state for state in sampler.states.values() if state.interval == interval]
    defer = interval < settings[ANALYSIS_INTERVAL]
    per_pass = max(1, round(settings[ANALYSIS_INTERVAL] / interval))
    spent: collections.Counter[str] = collections.Counter()
    clock = time.thread_time_ns
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        for state in tier:
            a = clock()
            outcome = sampler.read_source(state, capture=defer)
            b = clock()
            sampler.take(state, outcome, 0.0)
            spent[state.spec.name, "read"] += b - a
            spent[state.spec.name, "settle"] += clock() - b
        if ticks % per_pass == 0:
            for state in tier:
                a = clock()
                sampler.settle(state)
                spent[state.spec.name, "settle"] += clock() - a

    try:
        capacity = max((s.ring.capacity for s in tier if s.ring is not None), default=0)
        for _ in range(capacity + 10):
            tick()
        results: dict[str, list[tuple[float, float, dict]]] = {"paced": [], "back to back": []}
        for _ in range(args.repeats):
            for kind in results:
                spent.clear()
                p0, t0 = time.process_time(), time.thread_time()
                for _ in range(args.ticks):
                    tick()
                    if kind == "paced":
                        time.sleep(interval)
                process = (time.process_time() - p0) / args.ticks
                thread = (time.thread_time() - t0) / args.ticks
                results[kind].append((process, thread, {k: v / args.ticks / 1e3 for k, v in spent.items()}))
    finally:
        for state in sampler.states.values():
            state.source.close()
    print(f"fast tier every {interval:g}s: {', '.join(s.spec.name for s in tier)}; {args.ticks} ticks a measurement")
    for kind, runs in results.items():
        process = [1e6 * p for p, _, _ in runs]
        thread = [1e6 * t for _, t, _ in runs]
        print(f"{kind:13s} CPU µs per tick: process {' / '.join(f'{v:.0f}' for v in process)}"
              f" ({100 * statistics.mean(process) / 1e6 / interval:.2f} % of a core), reading thread"
              f" {' / '.join(f'{v:.0f}' for v in thread)}")
    print(f"{'paced, per source':24s}{'read µs':>10s}{'settle µs':>11s}")
    for state in tier:
        name = state.spec.name
        reads = [steps[name, "read"] for _, _, steps in results["paced"]]
        settles = [steps[name, "settle"] for _, _, steps in results["paced"]]
        print(f"{name:24s}{statistics.mean(reads):10.0f}{statistics.mean(settles):11.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
