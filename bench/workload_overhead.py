"""What instrumenting a loop with gpuwait.workload costs the loop.

    python3 bench/workload_overhead.py [--iterations 1000000] [--repeats 7]

Measures, in nanoseconds per call (best of the repeats, each timing ``iterations`` calls):
one phase mark (``Workload.mark``), one step of ``Workload.batches`` over a plain iterator
(two marks, the step and sample counts, the generator), a ``with workload.comm():`` block,
and as the reference measured in the same run, a bare ``time.perf_counter()`` call. Each
figure is also given as a ratio to the reference, so that results from machines of different
speed compare. The flushing thread writes the spool once a second meanwhile, as in a job. Not
a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))

from gpuwait.client import COMPUTE, DATA, Workload  # noqa: E402


def best_ns(fn, iterations: int, repeats: int) -> float:
    results = []
    for _ in range(repeats):
        gc.disable()
        start = time.perf_counter_ns()
        fn(iterations)
        results.append((time.perf_counter_ns() - start) / iterations)
        gc.enable()
    return min(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as spool:
        workload = Workload(spool=spool)

        def reference(n):
            clock = time.perf_counter
            for _ in range(n):
                clock()

        def marks(n):
            mark = workload.mark
            for _ in range(n // 2):
                mark(DATA)
                mark(COMPUTE)

        def batches(n):
            for _ in workload.batches(range(n), batch_size=32):
                pass

        def comm_blocks(n):
            comm = workload.comm
            for _ in range(n):
                with comm():
                    pass

        ref = best_ns(reference, args.iterations, args.repeats)
        rows = [("time.perf_counter() (reference)", ref),
                ("Workload.mark", best_ns(marks, args.iterations, args.repeats)),
                ("Workload.batches, per step", best_ns(batches, args.iterations, args.repeats)),
                ("with Workload.comm()", best_ns(comm_blocks, args.iterations, args.repeats))]
        workload.close()
        print(f"python {sys.version.split()[0]}, {args.iterations} calls x {args.repeats} repeats, flushes written: {workload.writes}")
        print(f"{'':36} {'ns/call':>9} {'x ref':>7}")
        for name, ns in rows:
            print(f"{name:36} {ns:9.0f} {ns / ref:7.1f}")


if __name__ == "__main__":
    main()
