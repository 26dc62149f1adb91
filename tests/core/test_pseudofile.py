"""pseudofile.read_unless_hung: a file whose earlier read is still blocked is not read again,
unless what the path names has changed since."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from gpuwait.core import pseudofile
from gpuwait.core.pseudofile import StillReading, read_unless_hung


class BlockedRead(threading.Thread):
    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.result: str | None = None

    def run(self) -> None:
        self.result = read_unless_hung(self.path)


def in_flight(path: str) -> bool:
    with pseudofile._in_flight_lock:
        return bool(pseudofile._in_flight.get(path))


def wait_until(predicate, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_second_read_of_a_blocked_file_fails_at_once_and_a_restored_file_is_read(tmp_path):
    fifo = str(tmp_path / "port_xmit_data")
    os.mkfifo(fifo)
    blocked = BlockedRead(fifo)
    blocked.start()
    wait_until(lambda: in_flight(fifo))
    time.sleep(pseudofile.BLOCKED_AFTER_SECONDS)
    # Blocked in open: what the path names now is what it waits on.
    with pytest.raises(StillReading) as e:
        read_unless_hung(fifo)
    assert pseudofile.os_cause(fifo, e.value) == f"timeout:{fifo}"
    writer = os.open(fifo, os.O_WRONLY)  # the blocked open returns; its read now waits
    try:
        time.sleep(0.1)
        with pytest.raises(StillReading):
            read_unless_hung(fifo)
        # The file restored (a new inode at the same path): read at once, though the old
        # read still waits on the FIFO.
        restored = tmp_path / "restored"
        restored.write_text("12345\n")
        os.replace(restored, fifo)
        assert read_unless_hung(fifo) == "12345\n"
        assert blocked.is_alive()
        os.write(writer, b"7\n")
    finally:
        os.close(writer)
    blocked.join(5)
    assert blocked.result == "7\n"
    assert not in_flight(fifo)
    assert read_unless_hung(fifo, 3) == "123"


def test_reads_that_fail_leave_nothing_behind(tmp_path):
    missing = str(tmp_path / "gone")
    for _ in range(3):
        with pytest.raises(FileNotFoundError):
            read_unless_hung(missing)
    assert not in_flight(missing)


def test_a_read_of_the_same_file_by_another_thread_just_begun_is_no_hang(tmp_path, monkeypatch):
    # Two sources read one attribute at the same moment: the second is read, not refused.
    path = tmp_path / "link_layer"
    path.write_text("InfiniBand\n")
    other = pseudofile._InFlight()
    other.identity = pseudofile._identity(os.stat(path))
    monkeypatch.setitem(pseudofile._in_flight, str(path), [other])
    assert read_unless_hung(str(path)) == "InfiniBand\n"
    # The same read still in flight after BLOCKED_AFTER_SECONDS is hung: refused at once.
    other.started -= pseudofile.BLOCKED_AFTER_SECONDS
    with pytest.raises(StillReading):
        read_unless_hung(str(path))


# -- KeptDescriptors: kernel files re-read through a descriptor kept open ---------------------


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_kernel_file_is_read_through_one_kept_descriptor_and_reads_what_the_kernel_makes_now():
    kept = pseudofile.KeptDescriptors()
    before = open_descriptors()
    first = kept.read("/proc/uptime")
    assert len(kept) == 1
    fd = kept.take("/proc/uptime")
    assert fd is not None and kept.keep("/proc/uptime", fd, True)
    time.sleep(0.05)  # /proc/uptime counts in hundredths of a second
    second = kept.read("/proc/uptime")
    assert float(second.split()[0]) > float(first.split()[0])
    assert kept.take("/proc/uptime") == fd  # the same descriptor, read again at offset 0
    kept.keep("/proc/uptime", fd, True)
    # A sysfs attribute as well; its content is what a fresh open reads.
    online = "/sys/devices/system/cpu/online"
    assert kept.read(online) == kept.read(online) == pseudofile.read(online)
    assert len(kept) == 2
    assert len(open_descriptors() - before) == 2
    kept.close()
    assert open_descriptors() == before and len(kept) == 0


def test_a_file_that_is_no_kernel_file_is_opened_at_every_read_and_seen_replaced(tmp_path):
    # A copied tree or a bind-mounted snapshot: a kept descriptor would read the replaced file.
    path = tmp_path / "port_xmit_data"
    path.write_text("1\n")
    kept = pseudofile.KeptDescriptors()
    before = open_descriptors()
    assert kept.read(str(path)) == "1\n"
    replacement = tmp_path / "new"
    replacement.write_text("2\n")
    os.replace(replacement, path)
    assert kept.read(str(path)) == "2\n"
    assert len(kept) == 0 and open_descriptors() == before


def test_a_kept_descriptor_of_a_kernel_object_gone_is_closed_and_the_file_reported_gone():
    # A process's files stand for a kernel object that goes away, as a removed device's do:
    # the kept descriptor fails (ESRCH here, ENODEV for a device) and a fresh open says gone.
    child = subprocess.Popen(["sleep", "30"])
    path = f"/proc/{child.pid}/stat"
    kept = pseudofile.KeptDescriptors()
    before = open_descriptors()
    try:
        assert kept.read(path).startswith(f"{child.pid} ")
        assert kept.read(path).startswith(f"{child.pid} ")
        assert len(kept) == 1
    finally:
        child.kill()
        child.wait()
    with pytest.raises(FileNotFoundError):  # the fresh open's answer, not the descriptor's ESRCH
        kept.read(path)
    assert len(kept) == 0 and open_descriptors() == before
    assert not in_flight(path)


def test_retain_closes_the_descriptors_of_files_no_longer_read():
    kept = pseudofile.KeptDescriptors()
    before = open_descriptors()
    kept.read("/proc/uptime")
    kept.read("/proc/loadavg")
    kept.retain(["/proc/loadavg"])
    assert len(kept) == 1 and len(open_descriptors() - before) == 1
    assert kept.take("/proc/uptime") is None
    kept.close()
    assert open_descriptors() == before


def test_a_kept_descriptor_held_by_a_hung_read_is_not_read_again_until_it_returns(monkeypatch):
    # A firmware that does not answer blocks the read in the driver (an HCA's counters, read
    # through read_unless_hung); staged here at pread.
    kept = pseudofile.KeptDescriptors()
    path = "/proc/uptime"
    read_unless_hung(path, None, kept)
    assert len(kept) == 1
    release = threading.Event()
    real_pread = os.pread

    def hung_pread(fd, n, offset):
        release.wait(10)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", hung_pread)
    results: list[str] = []
    blocked = threading.Thread(target=lambda: results.append(read_unless_hung(path, None, kept)), daemon=True)
    blocked.start()
    wait_until(lambda: in_flight(path))
    assert len(kept) == 0  # the hung read holds the descriptor
    time.sleep(pseudofile.BLOCKED_AFTER_SECONDS)
    with pytest.raises(StillReading):
        read_unless_hung(path, None, kept)
    release.set()
    blocked.join(5)
    assert results and float(results[0].split()[0]) > 0
    assert len(kept) == 1  # given back once the read returned
    monkeypatch.setattr(os, "pread", real_pread)
    assert float(read_unless_hung(path, None, kept).split()[0]) > 0
    kept.close()


def test_a_file_replaced_by_a_fifo_is_not_opened_to_be_kept(tmp_path):
    # A procfs copy whose file became a FIFO nobody writes (the fault matrix's hung read): the
    # read blocks where any open would, and only there, on the caller's thread.
    path = tmp_path / "stat"
    path.write_text("cpu0 1 2 3 4\n")
    kept = pseudofile.KeptDescriptors(devices=frozenset({os.stat(tmp_path).st_dev}))  # as if a kernel filesystem
    assert kept.read(str(path)) == "cpu0 1 2 3 4\n" and len(kept) == 1
    kept.close()
    path.unlink()
    os.mkfifo(path)
    fifo = pseudofile.KeptDescriptors(devices=frozenset({os.stat(tmp_path).st_dev}))
    reader = threading.Thread(target=lambda: fifo.read(str(path)), daemon=True)
    reader.start()
    writer = os.open(path, os.O_WRONLY)  # the reader's open returns once a writer comes
    os.write(writer, b"7\n")
    os.close(writer)
    reader.join(5)
    assert not reader.is_alive() and len(fifo) == 0  # read once, and not opened again to be kept


MOUNTINFO = """\
22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
23 28 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw
41 28 0:21 / /host/sys ro,relatime - sysfs sysfs ro
52 28 0:45 / /tmp rw,nosuid,nodev shared:30 master:2 propagate_from:1 - tmpfs tmpfs rw
this line is damaged
"""


def test_the_kernel_filesystems_are_the_proc_and_sysfs_mounts_of_mountinfo(tmp_path):
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTINFO)
    assert pseudofile.kernel_filesystem_devices(str(path)) == {os.makedev(0, 21), os.makedev(0, 22)}
    assert pseudofile.kernel_filesystem_devices(str(tmp_path / "absent")) == frozenset()
    real = pseudofile.kernel_filesystem_devices()
    assert os.stat("/proc/uptime").st_dev in real
    assert os.stat("/sys/devices/system/cpu/online").st_dev in real
    assert os.stat(tmp_path).st_dev not in real
