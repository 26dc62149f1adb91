"""What one read of the GPU sources costs the process, and how much of it is the NVML double's.

    python3 bench/bignode.py build BIG --size big
    PYTHONPATH=tests/support/nvml_double:exporter GPUWAIT_NVML_DOUBLE=BIG/gpus.yaml \\
        python3 bench/gpu_read_cost.py --tree BIG [--reads 100]

A read of ``gpu`` or ``gpu_device`` hands one job per GPU to that GPU's worker thread and waits
for them all, so the CPU time of the reading thread leaves most of it out. This measures the
CPU time of the whole process (every thread) per read, and, by timing each call into the
double's ``nvml*`` functions in whichever thread makes it, the part spent inside the double:
its figures are the double's, not a driver's, and a real node's share has to be measured
there. The rest is gpuwait's own: the jobs, the executor's hand-offs between threads, the
session's bookkeeping and the payload. ``gpu`` is read every --sample.interval, as live, so
that the driver samples arrive as they would.

``--inline`` runs each GPU's job on the reading thread instead of handing it to the GPU's
worker (no deadline: a hung call would hang the read), so that the difference from a run
without it is what the hand-offs between threads cost.

Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import gc
import pathlib
import sys
import threading
import time
import types

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))

import pynvml  # noqa: E402  (the double, from tests/support/nvml_double on PYTHONPATH)

from gpuwait.core.registry import registry, resolve  # noqa: E402

_inside = collections.Counter()
_depth = threading.local()


def _timed(fn):
    def call(*args, **kwargs):
        if getattr(_depth, "n", 0):
            return fn(*args, **kwargs)  # a double function calling another: counted once
        _depth.n = 1
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _inside[threading.current_thread().name] += time.thread_time() - started
            _depth.n = 0
    return call


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=pathlib.Path, required=True)
    ap.add_argument("--reads", type=int, default=100)
    ap.add_argument("--inline", action="store_true", help="run the jobs on the reading thread (see above)")
    args = ap.parse_args()
    if not getattr(pynvml, "__file__", "").startswith(str(REPO / "tests" / "support")):
        print("pynvml is not the NVML double: put tests/support/nvml_double first on PYTHONPATH", file=sys.stderr)
        return 2
    for name in dir(pynvml):
        fn = getattr(pynvml, name)
        if name.startswith("nvml") and isinstance(fn, types.FunctionType):
            setattr(pynvml, name, _timed(fn))
    if args.inline:
        from gpuwait.nvml import executor

        def submit(self, job):
            ticket = executor.Ticket(job)
            ticket.started_at = time.monotonic()
            try:
                job(ticket, ticket.out)
            except BaseException as e:  # as a worker hands it over
                ticket.error = e
            ticket.done = True
            return ticket
        executor.DeviceExecutor.submit = submit
    settings, _ = resolve([f"--path.procfs={args.tree / 'proc'}", f"--path.sysfs={args.tree / 'sys'}"])
    specs = {s.name: s for c in registry() for s in c.sources}
    print(f"{'source':12s}{'every s':>9s}{'CPU ms/read':>13s}{'in double':>11s}{'gpuwait':>9s}"
          f"{'reading thread':>16s}{'% of a core: double':>21s}{'gpuwait':>9s}")
    for name, interval in (("gpu", settings.sample_interval), ("gpu_device", settings.slow_interval)):
        source = specs[name].factory(settings)
        try:
            for _ in range(2):  # the first reads start the workers and learn the devices
                source.read()
                time.sleep(settings.sample_interval)
            _inside.clear()
            gc.disable()
            p0, t0 = time.process_time(), time.thread_time()
            for _ in range(args.reads):
                source.read()
                if name == "gpu":
                    time.sleep(interval)
            process = (time.process_time() - p0) / args.reads
            reading = (time.thread_time() - t0) / args.reads
            gc.enable()
        finally:
            source.close()
        double = sum(_inside.values()) / args.reads
        own = process - double
        print(f"{name:12s}{interval:9g}{1000 * process:13.3f}{1000 * double:11.3f}{1000 * own:9.3f}"
              f"{1000 * reading:16.3f}{100 * double / interval:21.3f}{100 * own / interval:9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
