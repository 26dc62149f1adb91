"""What reading NCCL Inspector's dump files costs the nccl source.

    python3 bench/nccl_read.py [--processes 8] [--communicators 4] [--per-read 500] [--reads 40] [--repeats 5]

Writes a dump directory the way NCCL Inspector's JSON mode fills it (one file per process,
``--communicators`` communicators each, one line per completed collective), then times the
source reading what ``--per-read`` collectives per process appended since its previous read,
``--reads`` times over. Reported (best of the repeats): microseconds per record read, and as
the reference measured in the same run, ``json.loads`` of the same lines alone, the least any
reader of the format does; the ratio compares across machines. Also the bytes per record and
the per-read cost at the default 1 s interval, as a share of one core. Not a test: it asserts
nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))
sys.path.insert(0, str(REPO / "tests"))  # conftest: the fixture paths
sys.path.insert(0, str(REPO / "tests" / "support"))

from fixture_host import inspector_line  # noqa: E402
from gpuwait.collectors.nccl.source import NcclSource  # noqa: E402
from gpuwait.core.source import HostPaths  # noqa: E402


def batch(process: int, communicators: int, first: int, count: int, now: float) -> str:
    return "".join(inspector_line(first + i, now, comm=f"0x{0x7f8c496ae9f661 + c:x}", rank=process, pid=1000 + process)
                   for i in range(count) for c in [i % communicators])


def run(args, dump: pathlib.Path) -> tuple[float, float, int]:
    """(seconds in the source, seconds in json.loads alone, records) over all reads."""
    source = NcclSource(HostPaths(), str(dump), max_bytes_per_read=64 << 20)
    source.read()
    seconds = reference = 0.0
    records = 0
    for n in range(args.reads):
        now = time.time()
        chunks = []
        for p in range(args.processes):
            text = batch(p, args.communicators, n * args.per_read, args.per_read, now)
            chunks.append(text)
            with open(dump / f"node-pid{1000 + p}.log", "a") as f:
                f.write(text)
        gc.disable()
        start = time.perf_counter()
        reading = source.read()
        seconds += time.perf_counter() - start
        start = time.perf_counter()
        for text in chunks:
            for line in text.encode().split(b"\n")[:-1]:
                json.loads(line)
        reference += time.perf_counter() - start
        gc.enable()
        records += sum(r.collectives for r in reading.data.ranks)
    return seconds, reference, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--communicators", type=int, default=4)
    parser.add_argument("--per-read", type=int, default=500)
    parser.add_argument("--reads", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    best = None
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as dump:
            path = pathlib.Path(dump)
            for p in range(args.processes):
                (path / f"node-pid{1000 + p}.log").write_text("")
            result = run(args, path)
        if best is None or result[0] < best[0]:
            best = result
    seconds, reference, records = best
    line = len(inspector_line(0, time.time()))
    per_read = seconds / args.reads
    print(f"python {sys.version.split()[0]}: {args.processes} processes x {args.per_read} collectives per read, "
          f"{args.reads} reads x {args.repeats} repeats, {records} records counted, {line} bytes per record")
    print(f"{'':34} {'us/record':>10} {'x ref':>7}")
    print(f"{'json.loads alone (reference)':34} {reference / records * 1e6:10.2f} {1.0:7.1f}")
    print(f"{'NcclSource.read':34} {seconds / records * 1e6:10.2f} {seconds / reference:7.1f}")
    print(f"one read of {args.processes * args.per_read} records: {per_read * 1e3:.1f} ms, "
          f"{per_read:.1%} of a core at collector.nccl.interval=1s")


if __name__ == "__main__":
    main()
