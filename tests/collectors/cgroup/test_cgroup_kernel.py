"""The owner cgroup source on this machine's real cgroup tree, under real load.

The test makes a cgroup of its own (a ``.scope``, so that the owner attribution names it as
a systemd unit) with the CPU quota "20000 100000": 0.2 CPU. A one-thread busy loop in it wants
a whole CPU, so the kernel lets it run 20 ms of each 100 ms period and throttles it for the
rest (sched-bwc.rst): nearly every period ends throttled, the cgroup uses quota/period = 0.2
cores, and its one run queue waits about 80 ms a period. A second process in it reads a file
with O_DIRECT, so every byte it reads reaches the disk and the cgroup's IO counters.

The owner comes from the real attribution of the busy loop's /proc/<pid>/cgroup, the source
reads /sys/fs/cgroup as the exporter does. Needs a writable cgroup tree (root, not inside a
container that mounts it read-only); without one the test fails and says so.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from gpuwait.collectors.cgroup import window
from gpuwait.collectors.cgroup.source import Layout, OwnerCgroupSource, detect_layout
from gpuwait.core.ring import ColumnRing
from gpuwait.core.source import HostPaths, user_hz
from gpuwait.owners.directory import OwnerDirectory
from gpuwait.owners.procpid import parse_pid_stat
from gpuwait.owners.tracker import read_owner

QUOTA_US, PERIOD_US = 20000, 100000
READ_BYTES = 8 << 20
#: blk-throttle counts a disk's IO for cgroup v1 only once a limit is set on that disk; this one
#: (10 GB/s) is far above anything the test reads at.
UNREACHED_BPS = 10 << 30
HOST = HostPaths("/proc", "/sys")

READER = """
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf, done = mmap.mmap(-1, 1 << 20), 0
while done < int(sys.argv[2]):
    n = os.preadv(fd, [buf], done)
    if n <= 0:
        break
    done += n
print(done)
"""


class KernelCgroup:
    """One cgroup, made in every hierarchy the source reads on this host."""

    def __init__(self, layout: Layout, name: str) -> None:
        self.layout = layout
        self.name = name
        roots = [layout.unified] if layout.version == 2 else [layout.cpu, layout.cpuacct, layout.blkio, layout.unified]
        self.dirs = [os.path.join(root, name) for root in dict.fromkeys(r for r in roots if r)]

    def create(self) -> None:
        try:
            if self.layout.version == 2:
                control = os.path.join(self.layout.unified, "cgroup.subtree_control")
                enabled = pathlib.Path(control).read_text().split()
                missing = [c for c in ("cpu", "io") if c not in enabled]
                if missing:
                    pathlib.Path(control).write_text(" ".join(f"+{c}" for c in missing))
            for d in self.dirs:
                os.mkdir(d)
        except OSError as e:
            self.remove()
            pytest.fail(f"the cgroup tree under {HOST.sys('fs', 'cgroup')} is not writable here ({e}): this test makes a "
                        "cgroup with a CPU quota and needs root on a host whose cgroup tree it may change")

    def write(self, hierarchy: str | None, name: str, text: str) -> None:
        pathlib.Path(hierarchy, self.name, name).write_text(text)

    def limit_cpu(self) -> None:
        if self.layout.version == 2:
            self.write(self.layout.unified, "cpu.max", f"{QUOTA_US} {PERIOD_US}")
        else:
            self.write(self.layout.cpu, "cpu.cfs_period_us", str(PERIOD_US))
            self.write(self.layout.cpu, "cpu.cfs_quota_us", str(QUOTA_US))

    def count_io_on(self, device: str) -> None:
        if self.layout.version == 1 and self.layout.blkio:
            self.write(self.layout.blkio, "blkio.throttle.read_bps_device", f"{device} {UNREACHED_BPS}")

    def spawn(self, *argv: str, **kw) -> subprocess.Popen:
        """Start a process that moves itself into the cgroup before it execs ``argv``."""
        enter = "".join(f"echo $$ > {d}/cgroup.procs && " for d in self.dirs)
        return subprocess.Popen(["sh", "-c", enter + 'exec "$@"', "sh", *argv], **kw)

    def remove(self) -> None:
        for d in self.dirs:
            deadline = time.monotonic() + 5
            while os.path.isdir(d):
                try:
                    os.rmdir(d)
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)


def disk_of(path: pathlib.Path) -> str:
    """"major:minor" of the whole disk the file is on (the cgroup counts IO per disk)."""
    st = os.stat(path)
    node = pathlib.Path(HOST.sys("dev", "block", f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    if not node.exists():
        pytest.fail(f"{path} is not on a block device (st_dev {os.major(st.st_dev)}:{os.minor(st.st_dev)}): "
                    "O_DIRECT reads there reach no disk the cgroup could count")
    node = node.resolve()
    if (node / "partition").exists():
        node = node.parent
    return (node / "dev").read_text().strip()


def cpu_seconds(pid: int) -> float:
    stat = parse_pid_stat(pathlib.Path(f"/proc/{pid}/stat").read_text())
    return (stat.utime + stat.stime) / user_hz()


@pytest.fixture
def kernel_cgroup():
    layout = detect_layout(HOST)
    if layout is None:
        pytest.fail(f"no cgroup filesystem under {HOST.sys('fs', 'cgroup')}")
    cgroup = KernelCgroup(layout, f"gpuwait-test-{os.getpid()}.scope")
    cgroup.create()
    procs: list[subprocess.Popen] = []
    try:
        yield cgroup, procs
    finally:
        for p in procs:
            p.kill()
            p.wait()
        cgroup.remove()


def test_throttling_cpu_and_direct_reads_of_a_real_cgroup(kernel_cgroup, tmp_path):
    cgroup, procs = kernel_cgroup
    data = tmp_path / "data.bin"
    with open(data, "wb") as f:
        f.write(os.urandom(READ_BYTES))
        f.flush()
        os.fsync(f.fileno())
    device = disk_of(data)
    cgroup.limit_cpu()
    cgroup.count_io_on(device)
    burner = cgroup.spawn(sys.executable, "-c", "while True: pass")
    procs.append(burner)
    time.sleep(0.3)  # the busy loop is in place and running

    owner = read_owner(HOST, burner.pid)
    assert owner is not None and owner.cgroup == f"/{cgroup.name}", owner
    directory = OwnerDirectory()
    directory.update([owner])
    source = OwnerCgroupSource(HOST, directory, max_age=60.0)
    ring = ColumnRing(64)
    readings = []

    def sample() -> None:
        reading = source.read()
        assert reading.errors == (), reading.errors
        readings.append(reading)
        ring.append(reading.t, window.columns(reading.data))

    # The busy loop alone first: one task, so one run queue to throttle.
    for _ in range(7):
        sample()
        time.sleep(0.25)
    alone = ring.view()
    burner_cpu_before, t_before = cpu_seconds(burner.pid), time.monotonic()
    reader = cgroup.spawn(sys.executable, "-c", READER, str(data), str(READ_BYTES), stdout=subprocess.PIPE, text=True)
    procs.append(reader)
    for _ in range(16):
        time.sleep(0.25)
        sample()
    burner_cpu_after, t_after = cpu_seconds(burner.pid), time.monotonic()
    assert reader.wait(10) == 0 and int(reader.stdout.read()) == READ_BYTES

    view = ring.view()
    oid = owner.id
    first, last = readings[0].data.owners[oid], readings[-1].data.owners[oid]
    assert last.path == f"/{cgroup.name}"
    assert window.quota_cores(view, oid) == pytest.approx(QUOTA_US / PERIOD_US)

    # What the cgroup used is what the kernel lets through, quota/period, and what the busy
    # loop's own /proc/<pid>/stat says it got. (On a machine whose CPUs other work keeps busy
    # it gets less than its quota in some periods, and those periods end unthrottled.)
    cores = window.cpu_cores(view, oid).mean
    assert 0.12 <= cores <= QUOTA_US / PERIOD_US + 0.03, cores
    own_rate = (burner_cpu_after - burner_cpu_before) / (t_after - t_before)
    assert cores == pytest.approx(own_rate, abs=0.04)  # the cgroup also counts the reader

    # The busy loop wants a whole CPU and may have 0.2: the periods it gets its 20 ms in end
    # throttled, which is nearly all of them.
    throttling = window.throttled_ratio(view, oid)
    assert throttling.level == window.OWN
    assert throttling.ratio >= 0.75, throttling
    # The kernel adds up the throttled time of every CPU's run queue of the group
    # (throttled_time, sched-bwc.rst): while the busy loop ran alone, one run queue was
    # throttled for what is left of each period, at most the time it neither ran nor waited
    # for a CPU, 1 - cores seconds a second. Once the reader is runnable on another CPU at the
    # same time, its run queue adds its own. The kernel adds a throttled spell to the counter
    # when it ends, so a short window may hold one spell more than its own span: up to
    # period - quota seconds over the window's length.
    alone_throttling = window.throttled_ratio(alone, oid)
    alone_cores = window.cpu_cores(alone, oid).mean
    alone_span = alone.times[-1] - alone.times[0]
    one_spell = (PERIOD_US - QUOTA_US) / 1e6 / alone_span
    assert alone_throttling.ratio >= 0.75, alone_throttling
    assert 0.0 < alone_throttling.throttled_seconds_rate <= 1.0 - alone_cores + one_spell + 0.02, (
        alone_throttling,
        alone_span,
    )
    assert throttling.throttled_seconds_rate > 0.0

    # Every byte read with O_DIRECT went to the disk, counted once in the cgroup's IO.
    read = last.io[device].read_bytes - (first.io[device].read_bytes if device in first.io else 0)
    assert READ_BYTES <= read <= READ_BYTES + (2 << 20), read
    rate = window.io_read_rate(view, oid).bytes_per_second
    assert rate.mean * (view.times[-1] - view.times[0]) == pytest.approx(read, rel=0.02)

    # Its pressure comes from its own cgroup's files where the kernel keeps them.
    psi_dir = cgroup.layout.unified
    if psi_dir and os.path.exists(os.path.join(psi_dir, cgroup.name, "cpu.pressure")):
        stalled = window.pressure_rate(view, oid, "cpu", "some").mean
        assert stalled is not None and 0.0 <= stalled <= 1.0
