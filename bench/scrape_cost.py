"""What a scrape costs gpuwait in CPU: building the families from what the sampler holds (once
per analysis pass, by the first scrape after it, which also makes the window summaries that no
analysis reads), then encoding them, in the Prometheus text
format and in OpenMetrics 1.0.0 (what Prometheus asks for first), with gpuwait's encoder and
with prometheus-client's (which first needs its own families made from gpuwait's, as a format
only it writes does), timed in one thread of one process.

    python3 bench/bignode.py build BIG --size big
    PYTHONPATH=exporter python3 bench/scrape_cost.py --tree BIG [--gpus] [--fill 20] [--repeat 20]

The sampler runs on the tree for --fill seconds with the bench writer moving the counters
(every default collector; the GPUs through the NVML double with --gpus and
PYTHONPATH=tests/support/nvml_double GPUWAIT_NVML_DOUBLE=BIG/gpus.yaml), then stops; the
renderings and encodings are timed on what it holds. Median CPU ms over --repeat. Not a test.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))

from prometheus_client.exposition import choose_encoder  # noqa: E402

from gpuwait.cli import enabled_collectors  # noqa: E402
from gpuwait.core.registry import resolve  # noqa: E402
from gpuwait.core.sampler import Sampler  # noqa: E402
from gpuwait.exposition.prometheus import GpuwaitCollector, _encode  # noqa: E402


def median_ms(fn, repeat: int) -> float:
    spent = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        spent.append(time.thread_time() - start)
    return 1000 * statistics.median(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=pathlib.Path, required=True)
    parser.add_argument("--gpus", action="store_true", help="with the gpu collector (the NVML double)")
    parser.add_argument("--fill", type=float, default=20.0, help="seconds of sampling before timing")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    argv = [f"--path.procfs={args.tree / 'proc'}", f"--path.sysfs={args.tree / 'sys'}"]
    settings, _ = resolve(argv + ([] if args.gpus else ["--no-collector.gpu"]))
    collectors = enabled_collectors(settings)
    writer = subprocess.Popen([sys.executable, str(REPO / "bench" / "bignode.py"), "write", str(args.tree)],
                              start_new_session=True)
    sampler = Sampler(collectors, settings)
    try:
        sampler.start()
        time.sleep(args.fill)
    finally:
        sampler.stop()
        writer.terminate()
        writer.wait(10)
    exposition = GpuwaitCollector(sampler, collectors)
    generation = iter(range(1, 1 << 30))
    rendering = exposition.render(0)
    blocks = [block for block in rendering.blocks if not isinstance(block, str)]
    series = sum(len(f.samples) for block in blocks for f in block)
    print(f"{series} series in {sum(len(b) for b in blocks)} families")
    build = median_ms(lambda: exposition.render(next(generation)), args.repeat)
    # The first scrape after a pass also makes the window summaries no analysis reads.
    end = max(state.ring.view().times[-1] for state in sampler.states.values() if state.ring is not None and len(state.ring))
    spent = []
    for _ in range(args.repeat):
        sampler.analyse_once(now=end)
        start = time.thread_time()
        exposition.render(next(generation))
        spent.append(time.thread_time() - start)
    after_pass = 1000 * statistics.median(spent)
    print(f"families built: {build:.2f} ms; by a scrape that finds a pass's summaries due, and makes them: {after_pass:.2f} ms")
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        encoder, content_type = choose_encoder(accept)
        eof = b"# EOF\n" if content_type.startswith("application/openmetrics-text") else b""
        def ours() -> None:
            for block in blocks:
                _encode(encoder, block, eof, content_type)

        library = median_ms(lambda: [_encode(encoder, block, eof) for block in blocks], args.repeat)
        own = median_ms(ours, args.repeat)
        print(f"{content_type.split(';')[0]:30s} encoded: prometheus-client {library:6.2f} ms, gpuwait {own:6.2f} ms "
              f"({own / library:.2f}); a scrape after a pass: {after_pass + library:6.2f} -> {after_pass + own:6.2f} ms")


if __name__ == "__main__":
    main()
