"""The connection guard's reaper: it looks at open connections for overrun deadlines, and
sleeps while none is open, so that an idle exporter is not woken between scrapes."""

from __future__ import annotations

import socket
import threading
import time

from gpuwait.exposition import server


class CountingCondition(threading.Condition):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.waits = 0

    def wait(self, timeout=None):
        self.waits += 1
        return super().wait(timeout)


def test_the_reaper_sleeps_while_no_connection_is_open_and_cuts_one_that_overruns(monkeypatch):
    monkeypatch.setattr(server.threading, "Condition", CountingCondition)
    guard = server.ConnectionGuard(4)
    ours, theirs = socket.socketpair()
    try:
        time.sleep(1.0)
        assert guard._cond.waits <= 1, f"woke {guard._cond.waits} times with nothing open"
        conn = guard.admit(ours)
        conn.deadline = time.monotonic() - 1.0
        deadline = time.monotonic() + 5.0
        while not conn.cut and time.monotonic() < deadline:
            time.sleep(0.05)
        assert conn.cut, "a connection admitted while the reaper slept was not looked at"
        theirs.settimeout(5.0)
        assert theirs.recv(1) == b"", "the cut connection is shut down"
        guard.release(conn)
        waits = guard._cond.waits
        time.sleep(1.0)
        assert guard._cond.waits <= waits + 1, "asleep again once the last connection is gone"
    finally:
        guard.stop()
        ours.close()
        theirs.close()
