"""Memory and CPU of the exporters over a long run, minute by minute: does RSS stay flat?

    python3 bench/soak.py [--size big] [--duration 3600] [--scrape-interval 15] [--every 60]

The same three exporters as bench/compare.py (gpuwait with the GPUs through the NVML double,
gpuwait without its gpu collector, node_exporter as the reference), on the same tree with the
writer moving its counters, scraped every --scrape-interval. Every --every seconds it prints,
per exporter, RSS (VmRSS), its peak so far (VmHWM), the CPU share since the last line and the
open descriptors; at the end, how much RSS grew between the first line after the warm-up and
the last, and over the second half alone (a leak grows in both, a warm-up only in the first).

Every process started is ended by its pid, whatever happens. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import compare
from compare import bignode, cpu_seconds, status_kib


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(bignode.SIZES), default="big")
    parser.add_argument("--duration", type=float, default=3600.0, help="measured seconds (default 3600)")
    parser.add_argument("--warm-up", type=float, default=compare.WARM_UP, help="seconds before the first line (default 60)")
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between lines (default 60)")
    args = parser.parse_args()
    size = bignode.SIZES[args.size]
    print(f"{args.size}: {size}; {args.duration:g}s after {args.warm_up:g}s of warm-up, scrape every "
          f"{args.scrape_interval:g}s, load {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpuwait-soak-") as tmp:
        tree = pathlib.Path(tmp) / "node"
        bignode.build(tree, **size)
        writer = subprocess.Popen([sys.executable, str(compare.REPO / "bench" / "bignode.py"), "write", str(tree)],
                                  start_new_session=True)
        running = compare.exporters(tree)
        rss: dict[str, list[int]] = {e.name: [] for e in running}
        try:
            for e in running:
                e.start(pathlib.Path(tmp))
            for e in running:
                e.wait_ready()
            started = time.monotonic()
            next_line = started + args.warm_up
            end = next_line + args.duration
            last_cpu = {e.name: (cpu_seconds(e.proc.pid), time.monotonic()) for e in running}
            print("minute  " + "  ".join(f"{e.name}: RSS / peak MB, CPU %, fds".rjust(44) for e in running), flush=True)
            while True:
                slot = time.monotonic()
                for e in running:
                    e.scrape(keep=False)
                if slot >= next_line:
                    cells = []
                    for e in running:
                        pid = e.proc.pid
                        now_cpu, now = cpu_seconds(pid), time.monotonic()
                        before_cpu, before = last_cpu[e.name]
                        last_cpu[e.name] = (now_cpu, now)
                        rss[e.name].append(status_kib(pid, "VmRSS"))
                        cells.append(f"{status_kib(pid, 'VmRSS') / 1024:7.1f} / {status_kib(pid, 'VmHWM') / 1024:5.1f}"
                                     f"  {100 * (now_cpu - before_cpu) / (now - before):6.2f}  {descriptors(pid):4d}")
                    print(f"{(slot - started) / 60:6.1f}  " + "  ".join(c.rjust(44) for c in cells), flush=True)
                    if slot >= end:
                        break
                    next_line += args.every
                time.sleep(max(0.0, args.scrape_interval - (time.monotonic() - slot)))
        finally:
            for e in running:
                e.stop()
            writer.terminate()
            writer.wait(10)
    # The first line is taken after the warm-up, but before the first minute's CPU is known.
    print("\nRSS growth, MB: first line to last, and over the second half")
    for name, values in rss.items():
        half = values[len(values) // 2]
        print(f"  {name}: {(values[-1] - values[0]) / 1024:+.1f}  ({(values[-1] - half) / 1024:+.1f} in the second half; "
              f"min {min(values) / 1024:.1f}, max {max(values) / 1024:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
