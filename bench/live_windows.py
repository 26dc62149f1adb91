"""The window statistics and the verdict on windows the real sampler filled, timed in one thread.

    python3 bench/bignode.py build BIG --size big
    PYTHONPATH=tests/support/nvml_double:exporter GPUWAIT_NVML_DOUBLE=BIG/gpus.yaml \\
        python3 bench/live_windows.py --tree BIG --save BIG/windows.pickle
    PYTHONPATH=tests/support/nvml_double:exporter python3 bench/live_windows.py --load BIG/windows.pickle \\
        [--dump results.txt]

With ``--tree``, runs every default source on the tree (the GPUs through the NVML double, the
bench writer moving the counters) for ``--warm-up`` seconds, so that each ring holds a full
window of rows as timed as a live exporter's, then stops sampling. ``--save`` keeps those
windows, ``--load`` times another checkout's code on the very same ones, and ``--dump`` writes
what each summarize and the verdict returned, so that two checkouts can be compared for the
same results as well as for their cost. ``bench/sampler_tick.py`` fills its rings with reads
taken back to back, whose timing the verdict's GPU grid does not see live.

Times are CPU time of the measuring thread (median and minimum over ``--repeat`` passes),
and the share of one core at each step's own schedule. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import pickle
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))

from gpuwait.cli import enabled_collectors  # noqa: E402
from gpuwait.core.plugin import AnalysisInputs  # noqa: E402
from gpuwait.core.registry import resolve  # noqa: E402
from gpuwait.core.sampler import Sampler  # noqa: E402


def fill(tree: pathlib.Path, warm_up: float) -> tuple[AnalysisInputs, list[str]]:
    argv = [f"--path.procfs={tree / 'proc'}", f"--path.sysfs={tree / 'sys'}"]
    # No analysis while sampling: the passes are timed afterwards, on the full windows.
    settings, _ = resolve([*argv, "--analysis.interval=1h"])
    writer = subprocess.Popen([sys.executable, str(REPO / "bench" / "bignode.py"), "write", str(tree)],
                              start_new_session=True)
    sampler = Sampler(enabled_collectors(settings), settings)
    try:
        sampler.start()
        time.sleep(warm_up)
    finally:
        sampler.stop()
        writer.terminate()
        writer.wait(10)
    # The window ends at the GPU source's newest row, as a pass at that moment would see it.
    end = max(s.ring.view().times[-1] for s in sampler.states.values() if s.ring is not None and len(s.ring))
    views = {name: s.ring.view(since=end - settings.analysis_window)
             for name, s in sampler.states.items() if s.ring is not None and len(s.ring)}
    latest = {name: s.latest for name, s in sampler.states.items() if s.latest is not None}
    return AnalysisInputs(views, {}, latest, end), argv


def timed(fn, repeat: int) -> list[float]:
    cpus = []
    gc.disable()
    try:
        for _ in range(repeat):
            c0 = time.thread_time()
            fn()
            cpus.append(time.thread_time() - c0)
    finally:
        gc.enable()
    return cpus


def breakdown(inputs: AnalysisInputs, settings, repeat: int) -> None:
    """CPU per verdict pass inside each analysis function the verdict module calls by name,
    and inside the network evidence's per-GPU alignment (inclusive of what they call)."""
    from gpuwait.analysis import verdict
    from gpuwait.analysis.evidence import network

    spent: dict[str, float] = {}

    def timed_call(name, fn):
        def call(*a, **kw):
            c0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - c0
        return call

    patched = []
    for name, fn in vars(verdict).items():
        if callable(fn) and getattr(fn, "__module__", "").startswith("gpuwait.analysis.") \
                and fn.__module__ != verdict.__name__ and not isinstance(fn, type):
            patched.append((verdict, name, fn))
    for name in ("storage", "checkpoint", "DataPipeline", "Network"):
        patched.append((verdict, name, getattr(verdict, name)))
    for name in ("alignment", "evidence"):
        patched.append((network.Network, name, getattr(network.Network, name)))
    for owner, name, fn in patched:
        setattr(owner, name, timed_call(f"{owner.__name__.rsplit('.', 1)[-1]}.{name}", fn))
    try:
        c0 = time.thread_time()
        for _ in range(repeat):
            verdict.VerdictAnalyser()(inputs, settings)
        total = (time.thread_time() - c0) / repeat
    finally:
        for owner, name, fn in patched:
            setattr(owner, name, fn)
    print(f"verdict pass, {1000 * total:.1f} ms CPU (mean), of which (inclusive, ms per pass):")
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        if seconds / repeat >= 0.0005:
            print(f"  {name:40s}{1000 * seconds / repeat:8.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=pathlib.Path, help="a bench/bignode.py tree to sample")
    ap.add_argument("--warm-up", type=float, default=65.0, help="seconds of sampling (default 65: one full window)")
    ap.add_argument("--save", type=pathlib.Path, help="keep the windows here")
    ap.add_argument("--load", type=pathlib.Path, help="time windows saved by --save")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--dump", type=pathlib.Path, help="write every result here, to compare checkouts")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time what the verdict calls: each function it imports from the analysis, per pass")
    args = ap.parse_args()
    if (args.tree is None) == (args.load is None):
        ap.error("give --tree or --load")
    if args.load:
        inputs, argv = pickle.loads(args.load.read_bytes())
    else:
        inputs, argv = fill(args.tree, args.warm_up)
        if args.save:
            args.save.write_bytes(pickle.dumps((inputs, argv)))
    settings, _ = resolve(argv)
    collectors = enabled_collectors(settings)
    print(f"windows: {', '.join(f'{n} {len(v)} rows' for n, v in inputs.views.items())}")
    print(f"{'step':32s}{'median ms':>10s}{'min ms':>9s}{'every s':>9s}{'% of a core':>13s}")
    stats, results = {}, []
    for collector in collectors:
        for spec in collector.sources:
            view = inputs.views.get(spec.name)
            if view is None or spec.summarize is None:
                continue
            stats[spec.name] = spec.summarize(view, settings)
            results.append((spec.name, stats[spec.name]))
            cpus = timed(lambda: spec.summarize(view, settings), args.repeat)
            interval = settings["analysis.interval"]
            print(f"{spec.name + ': summarize':32s}{1000 * statistics.median(cpus):10.2f}{1000 * min(cpus):9.2f}"
                  f"{interval:9g}{100 * statistics.median(cpus) / interval:13.2f}")
    inputs = AnalysisInputs(inputs.views, stats, inputs.latest, inputs.end)
    for collector in collectors:
        if collector.analyse is None:
            continue
        # A fresh analyser each pass where it keeps state between passes (the verdict's
        # hysteresis), so every pass does the same work.
        kind = type(collector.analyse)
        make = kind if kind.__module__.startswith("gpuwait.") else (lambda: collector.analyse)
        results.append((collector.name, make()(inputs, settings)))
        cpus = timed(lambda: make()(inputs, settings), args.repeat)
        interval = settings[collector.analyse_every] if collector.analyse_every else settings["analysis.interval"]
        print(f"{collector.name + ': analyse':32s}{1000 * statistics.median(cpus):10.2f}{1000 * min(cpus):9.2f}"
              f"{interval:9g}{100 * statistics.median(cpus) / interval:13.2f}")
    if args.breakdown:
        breakdown(inputs, settings, args.repeat)
    if args.dump:
        args.dump.write_text("".join(f"{name}: {result!r}\n" for name, result in results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
