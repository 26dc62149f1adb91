"""What one analysis pass costs a collector's window statistics when the counters move, as
they do live: a full ring of 601 rows (60 s at 10 Hz) of byte counters that advance by a
random amount each interval, bursts included, then passes that each follow 10 new rows (the
analysis runs every second), timed as CPU of this thread.

    PYTHONPATH=exporter python3 bench/window_pass.py [--series 32] [--passes 60] [--seed 1]

bench/sampler_tick.py fills its rings from the tree as it stands, so its counters do not move
between reads and its summaries are the best case; this one is the case of a busy node.
Run it from two checkouts (each with its own exporter/ on PYTHONPATH) to compare them.
"""

from __future__ import annotations

import argparse
import random
import time

from gpuwait.collectors.netdev import window as netdev_window
from gpuwait.collectors.rdma import window as rdma_window
from gpuwait.core.ring import ColumnRing


def measure(name: str, keys: list, summarize, passes: int, rnd: random.Random) -> float:
    ring = ColumnRing(601)
    values = {key: 0.0 for key in keys}
    clock = [0.0]

    def rows(n: int) -> None:
        for _ in range(n):
            clock[0] += rnd.uniform(0.095, 0.105)
            for key in keys:
                # a collective's burst now and then, a trickle otherwise
                values[key] += rnd.uniform(0, 1e9) if rnd.random() < 0.3 else rnd.uniform(0, 1e6)
            ring.append(clock[0], dict(values))
    rows(700)
    summarize(ring.view(since=clock[0] - 60.0), None)
    spent = 0.0
    for _ in range(passes):
        rows(10)
        start = time.process_time()
        summarize(ring.view(since=clock[0] - 60.0), None)
        spent += time.process_time() - start
    per_pass = spent / passes * 1e6
    print(f"{name:14s} {len(keys):3d} series  {per_pass:8.0f} µs a pass (view and summarize)")
    return per_pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=32, help="counters per collector (default 32)")
    parser.add_argument("--passes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    half = max(1, args.series // 2)
    measure("netdev", [(d, f"eth{i}") for d in netdev_window.DIRECTIONS for i in range(half)],
            netdev_window.summarize, args.passes, rnd)
    # RDMA: bytes (tx, rx) and packets (txp, rxp) per port, in 4-octet words as the HCA counts
    ports = max(1, args.series // 4)
    measure("rdma_traffic", [(kind, f"mlx5_{i}", 1, "InfiniBand") for kind in ("tx", "rx", "txp", "rxp")
                             for i in range(ports)], rdma_window.summarize, args.passes, rnd)


if __name__ == "__main__":
    main()
