"""A big node as procfs/sysfs trees, and a writer that keeps its counters moving.

    python3 bench/bignode.py build DIR [--cores 192 --disks 24 --netdevs 16 --hcas 8 --gpus 8 --nfs 4]
    python3 bench/bignode.py write DIR [--period 0.1]     # until killed

DIR/proc and DIR/sys are what ``--path.procfs`` and ``--path.sysfs`` of gpuwait and of
node_exporter point at; DIR/gpus.yaml describes the GPUs to the NVML test double
(tests/support/nvml_double): H100s with GPM and 18 NVLink links each, one process per GPU. The RDMA
HCAs are the fixture host's two (tests/fixtures/host: an NDR InfiniBand and a RoCE HCA with
their counters and hw_counters) repeated, half of each kind, each on its own PCI root port.
The writer rewrites every counter file the exporters sample, whole (``os.replace``), as the
kernel's pseudo-files change: a reader never sees half of an update.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pathlib
import shutil
import signal
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "host"
IB_FUNCTION = "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"
ROCE_FUNCTION = "devices/pci0000:a7/0000:a7:01.0/0000:a8:00.0"
TRAFFIC_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets")
SELF_PID = 1000


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".new")
    staging.write_text(text)
    os.replace(staging, path)


# -- the texts, as functions of a tick --------------------------------------------------------

def proc_stat(cores: int, tick: int) -> str:
    lines = []
    total = [0] * 10
    for n in range(cores):
        # Cores busy in turn, 20..80 % of each tick's 10 jiffies, so window statistics have
        # something to summarise; the counters only ever grow, as the kernel's do.
        busy = _busy_jiffies(n, tick)
        row = [100_000 + n * 13 + busy, 500, 20_000 + tick, 900_000 + 10 * tick - busy, 3_000 + tick // 5, 0,
               800 + tick // 10, 0, 0, 0]
        total = [a + b for a, b in zip(total, row)]
        lines.append(f"cpu{n} " + " ".join(map(str, row)))
    head = "cpu  " + " ".join(map(str, total))
    tail = [proc_stat_intr(cores, tick), f"ctxt {5_000_000 + tick * 40_000}", "btime 1795950121",
            f"processes {2_000_000 + tick}", f"procs_running {3 + tick % 9}", f"procs_blocked {tick % 3}",
            f"softirq {900_000 + tick * 700} 0 0 0 0 0 0 0 0 0 0"]
    return "\n".join([head, *lines, *tail]) + "\n"


def proc_stat_intr(cores: int, tick: int) -> str:
    """The ``intr`` line: the total, then one count per IRQ number below the kernel's nr_irqs,
    which x86 sizes at boot from the CPUs and the IO-APIC pins (arch_probe_nr_irqs in
    arch/x86/kernel/apic/vector.c: 16 legacy + gsi_top + 8 per CPU, + 16 per pin for MSI).
    One 24-pin IO-APIC per 48 cores is assumed; that gives 440 counts for 2 CPUs, where a
    2-CPU VM's kernel printed 425. The per-CPU vectors (device queues) count, the rest stay 0."""
    pins = 24 * max(1, cores // 48)
    irqs = 16 + pins + 8 * cores + 16 * pins
    counts = [(i * 7 + tick * 3) if 16 <= i < 16 + 8 * cores and i % 3 == 0 else 0 for i in range(irqs)]
    return f"intr {sum(counts)} " + " ".join(map(str, counts))


def _busy_jiffies(core: int, tick: int) -> int:
    """User jiffies of ``core`` up to ``tick``: 2 + (core + k) % 7 in tick k, summed."""
    cycles, rest = divmod(tick, 7)
    return 2 * tick + 21 * cycles + sum((core + k) % 7 for k in range(1, rest + 1))


def diskstats(disks: int, tick: int) -> str:
    lines = []
    for n in range(disks):
        reads, writes = 1_000_000 + tick * (40 + n), 2_000_000 + tick * (90 + n)
        fields = [reads, 100, reads * 256, reads // 3, writes, 400, writes * 128, writes // 4, tick % 4,
                  200_000 + tick * 50, 300_000 + tick * 70, 10, 0, 1000, 5, 3_000 + tick, 100]
        lines.append(f" 259 {n * 2:7d} nvme{n}n1 " + " ".join(map(str, fields)))
    lines.append(f"   9       0 md0 {tick * 10} 0 {tick * 2560} 0 {tick * 5} 0 {tick * 640} 0 0 0 0 0 0 0 0 0 0")
    return "\n".join(lines) + "\n"


def net_dev(netdevs: int, tick: int) -> str:
    lines = ["Inter-|   Receive                                                |  Transmit",
             " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed",
             f"    lo: {tick * 1000} {tick * 10} 0 0 0 0 0 0 {tick * 1000} {tick * 10} 0 0 0 0 0 0"]
    for n in range(netdevs):
        rx, tx = tick * (1_250_000 + n * 1000), tick * (900_000 + n * 1000)
        lines.append(f"ens{n}f0np0: {rx} {rx // 1500} 0 {tick // 50} 0 0 0 {tick} {tx} {tx // 1500} 0 0 0 0 0 0")
    return "\n".join(lines) + "\n"


def pressure(resource: str, tick: int) -> str:
    some = f"some avg10=1.20 avg60=1.10 avg300=0.90 total={10_000_000 + tick * 7000}"
    if resource == "cpu":
        return some + f"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={tick * 10}\n"
    return some + f"\nfull avg10=0.80 avg60=0.70 avg300=0.60 total={5_000_000 + tick * 3000}\n"


def mountstats(mounts: int, tick: int) -> str:
    """The fixture host's mountstats, its one NFS mount repeated ``mounts`` times, counting."""
    text = (FIXTURE / "proc/self/mountstats").read_text()
    head, sep, nfs = text.partition("device 10.40.0.10:/datasets")
    nfs_block, sep2, rest = (sep + nfs).partition("\ndevice tmpfs mounted on /run/user/1000")
    blocks = []
    for m in range(mounts):
        block = nfs_block.replace("10.40.0.10:/datasets", f"10.40.0.{10 + m}:/datasets{m}")
        block = block.replace("/mnt/datasets", f"/mnt/datasets{m}")
        blocks.append(_advance_ops(block, tick))
    return head + "\n".join(blocks) + sep2 + rest


def _advance_ops(block: str, tick: int) -> str:
    out = []
    for line in block.split("\n"):
        name, colon, rest = line.strip().partition(":")
        numbers = rest.split()
        if colon and name.isupper() and len(numbers) >= 8 and all(x.isdigit() for x in numbers):
            numbers = [str(int(x) + tick * (i + 1)) if i < 8 else x for i, x in enumerate(numbers)]
            line = f"{line[: len(line) - len(line.lstrip())]}{name}: {' '.join(numbers)}"
        out.append(line)
    return "\n".join(out)


# -- building the tree ------------------------------------------------------------------------

def _hca_paths(n: int) -> tuple[str, str]:
    """(PCI function path under sys, its address) of HCA n: one root port each."""
    root = 0x20 + 0x10 * n
    address = f"0000:{root + 1:02x}:00.0"
    return f"devices/pci0000:{root:02x}/0000:{root:02x}:01.0/{address}", address


def build(root: pathlib.Path, cores: int, disks: int, netdevs: int, hcas: int, gpus: int, nfs: int) -> dict:
    if root.exists():
        shutil.rmtree(root)
    proc, sys_ = root / "proc", root / "sys"
    (proc / "pressure").mkdir(parents=True)
    (proc / "net").mkdir()
    (proc / str(SELF_PID)).mkdir()
    os.symlink(str(SELF_PID), proc / "self")  # procfs's own self is a link, which node_exporter resolves
    (proc / "uptime").write_text("86400.00 16588800.00\n")  # a day up; process start times count from boot
    ports = []
    for n in range(hcas):
        ib = n < (hcas + 1) // 2
        template = IB_FUNCTION if ib else ROCE_FUNCTION
        device = f"mlx5_{n}"
        function, address = _hca_paths(n)
        target = sys_ / function
        shutil.copytree(FIXTURE / "sys" / template, target, symlinks=True)
        old = "mlx5_0" if ib else "mlx5_1"
        (target / "infiniband" / old).rename(target / "infiniband" / device)
        device_link = target / "infiniband" / device / "device"
        device_link.unlink()
        os.symlink(f"../../../{address}", device_link)
        netdev = f"ibp{n}s0" if ib else f"ens{n}f0np0"
        for net in (target / "net").iterdir() if (target / "net").exists() else ():
            net.rename(target / "net" / netdev)
        ndevs = target / "infiniband" / device / "ports/1/gid_attrs/ndevs"
        for f in ndevs.iterdir() if ndevs.exists() else ():
            f.write_text(f"{netdev}\n")
        (sys_ / "class/infiniband").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../{function}/infiniband/{device}", sys_ / "class/infiniband" / device)
        (sys_ / "bus/pci/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../{function}", sys_ / "bus/pci/devices" / address)
        ports.append(str(sys_ / function / "infiniband" / device / "ports/1/counters"))
    machine = {
        "driver_version": "550.90.07", "cuda_version": 12040, "count": gpus,
        "defaults": {"name": "NVIDIA H100 80GB HBM3", "architecture": "hopper", "gpm": True,
                     "memory_total": 85520809984, "memory_used": 61203283968,
                     "pcie": {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "gpu_max_gen": 5,
                              "tx_rate": 3.0e9, "rx_rate": 9.0e9},
                     "nvlink": {"links": 18, "rate": 180.0e9},
                     "utilization": {"period": 1.0, "duty": 0.7, "high": 0.97, "low": 0.03},
                     "power": {"idle": 110, "max": 680, "limit": 700}},
        "gpus": {i: {"processes": [{"pid": 300_000 + i, "used_memory": 60129542144, "sm": 0.8}]} for i in range(gpus)},
    }
    (root / "gpus.yaml").write_text(json.dumps(machine, indent=1) + "\n")  # JSON is YAML
    layout = {"cores": cores, "disks": disks, "netdevs": netdevs, "hcas": hcas, "gpus": gpus, "nfs": nfs, "ports": ports}
    (root / "layout.json").write_text(json.dumps(layout, indent=1) + "\n")
    write_once(root, layout, 0)
    return layout


def write_once(root: pathlib.Path, layout: dict, tick: int) -> None:
    proc = root / "proc"
    _write(proc / "stat", proc_stat(layout["cores"], tick))
    _write(proc / "diskstats", diskstats(layout["disks"], tick))
    _write(proc / "net" / "dev", net_dev(layout["netdevs"], tick))
    for resource in ("cpu", "io", "memory"):
        _write(proc / "pressure" / resource, pressure(resource, tick))
    if tick % 10 == 0:  # NFS op counters move slowly; mountstats is a big text
        _write(proc / str(SELF_PID) / "mountstats", mountstats(layout["nfs"], tick))
    for n, counters in enumerate(layout["ports"]):
        words = 1_000_000_000 + tick * (50_000_000 + n)
        values = (words, words + 7, words // 1024, words // 1000)
        for name, v in zip(TRAFFIC_COUNTERS, values):
            _write(pathlib.Path(counters) / name, f"{v}\n")


def write_forever(root: pathlib.Path, period: float) -> int:
    # Two writers on one tree count from different ticks: every counter would go back and
    # forth, and every window statistic take its slow path (a column with a reset is no
    # longer steady), which is not what a node's counters do.
    lock = open(root / "writer.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"bignode.py write: another writer is running on {root}; it keeps the counters moving",
              file=sys.stderr)
        return 2
    layout = json.loads((root / "layout.json").read_text())
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    tick, due = 1, time.monotonic()
    while not stop:
        write_once(root, layout, tick)
        tick += 1
        due += period
        time.sleep(max(0.0, due - time.monotonic()))
    return 0


SIZES = {
    "small": dict(cores=32, disks=4, netdevs=2, hcas=2, gpus=2, nfs=1),
    "medium": dict(cores=96, disks=12, netdevs=8, hcas=4, gpus=4, nfs=2),
    "big": dict(cores=192, disks=24, netdevs=16, hcas=8, gpus=8, nfs=4),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir", type=pathlib.Path)
    b.add_argument("--size", choices=sorted(SIZES), default="big")
    for key in SIZES["big"]:
        b.add_argument(f"--{key}", type=int)
    w = sub.add_parser("write")
    w.add_argument("dir", type=pathlib.Path)
    w.add_argument("--period", type=float, default=0.1)
    args = parser.parse_args()
    if args.command == "build":
        size = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in SIZES[args.size].items()}
        print(json.dumps(build(args.dir, **size)))
        return 0
    return write_forever(args.dir, args.period)


if __name__ == "__main__":
    raise SystemExit(main())
