"""What a read of a kernel file costs, on this machine's own procfs and sysfs: opened, read and
closed at every read (``pseudofile.read``), the same with the hung-read bookkeeping the RDMA
counters are read with (``pseudofile.read_unless_hung``), and through a descriptor kept open
and read again from offset 0 (``pseudofile.KeptDescriptors``), in CPU µs of this process per
read (user and system), with the ratio to open/read/close measured in the same run.

    PYTHONPATH=exporter python3 bench/kept_reads.py [--reads 5000]

The files are the fast tier's: /proc/stat, /proc/diskstats, /proc/net/dev, /proc/pressure/*,
and sysfs counter attributes, the RDMA port counters where this machine has an HCA
(/sys/class/infiniband/*/ports/*/counters) and otherwise the network interfaces' statistics
(/sys/class/net/*/statistics), which sysfs makes the same way: a driver callback at each read.
A bench tree (bench/bignode.py) is on tmpfs, where nothing is kept: only a real procfs and
sysfs show the difference, so this runs on the machine's own.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource

from gpuwait.core import pseudofile


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def per_read(read, paths: list[str], reads: int) -> float:
    """CPU µs a read, over ``reads`` rounds of every path."""
    for path in paths:  # open what is kept, warm the caches
        read(path)
    start = cpu_seconds()
    for _ in range(reads):
        for path in paths:
            read(path)
    return (cpu_seconds() - start) / (reads * len(paths)) * 1e6


def sysfs_counters() -> tuple[str, list[str]]:
    rdma = sorted(glob.glob("/sys/class/infiniband/*/ports/*/counters/port_*_data"))
    if rdma:
        return "RDMA port counters", rdma[:32]
    net = sorted(glob.glob("/sys/class/net/*/statistics/[rt]x_bytes") + glob.glob("/sys/class/net/*/statistics/[rt]x_packets"))
    return "network interface statistics", net[:32]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=5000, help="rounds over each group of files (default 5000)")
    args = parser.parse_args()
    procfs = [path for path in ("/proc/stat", "/proc/diskstats", "/proc/net/dev", "/proc/pressure/cpu",
                                "/proc/pressure/io", "/proc/pressure/memory") if os.access(path, os.R_OK)]
    label, sysfs = sysfs_counters()
    print(f"kernel filesystems kept: {len(pseudofile.kernel_filesystem_devices())} mounts (proc, sysfs)")
    print(f"{'files':44s} {'open/read/close':>16s} {'unless hung':>12s} {'kept':>8s} {'kept / open':>12s}")
    for name, paths in ((f"procfs: {len(procfs)} fast-tier files", procfs),
                        (f"sysfs: {len(sysfs)} {label}", sysfs)):
        if not paths:
            print(f"{name:44s} (none readable here)")
            continue
        kept = pseudofile.KeptDescriptors()
        probe = os.open(paths[0], os.O_RDONLY | os.O_CLOEXEC)
        if not kept.keep(paths[0], probe):
            os.close(probe)
            print(f"{name:44s} (not on a kernel filesystem here: nothing is kept)")
        kept.close()
        opened = per_read(pseudofile.read, paths, args.reads)
        unless_hung = per_read(pseudofile.read_unless_hung, paths, args.reads)
        kept_read = per_read(kept.read, paths, args.reads)
        kept.close()
        print(f"{name:44s} {opened:13.2f} µs {unless_hung:9.2f} µs {kept_read:5.2f} µs {kept_read / opened:12.2f}")
    if sysfs:
        print(f"\n32 sysfs counters at 10 Hz, % of one core: opened at each read (unless hung) {32 * 10 * unless_hung / 1e4:.2f}, "
              f"kept {32 * 10 * kept_read / 1e4:.2f}")


if __name__ == "__main__":
    main()
