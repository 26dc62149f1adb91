"""pseudofile.read_unless_hung: a file whose earlier read is still blocked is not read again,
unless what the path names has changed since."""

from __future__ import annotations

import os
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
