"""gpuwait.core.allocator: one malloc arena for every thread, asked of the real C library."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from gpuwait.core.allocator import limit_arenas

#: Threads that each allocate and free buffers above pymalloc's limit, then glibc's own count
#: of its arenas (malloc_stats prints one "Arena N:" block per arena, on stderr).
THREADS_ALLOCATING = """
import ctypes, sys, threading
sys.path.insert(0, {exporter!r})
from gpuwait.core.allocator import limit_arenas
if {limit}:
    assert limit_arenas()
barrier = threading.Barrier(8)
def work():
    barrier.wait()  # all at once: each thread finds the arenas busy and makes its own
    for _ in range(200):
        bytearray(300_000)
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()
"""


def arenas(limit: bool) -> int:
    exporter = os.path.join(os.path.dirname(__file__), "..", "..", "exporter")
    done = subprocess.run([sys.executable, "-c", THREADS_ALLOCATING.format(exporter=exporter, limit=limit)],
                          capture_output=True, text=True, timeout=60, check=True)
    return len(re.findall(r"^Arena \d+:", done.stderr, re.M))


def test_threads_share_one_arena_once_limited():
    assert arenas(limit=False) > 1  # glibc's default: the busy threads made arenas of their own
    assert arenas(limit=True) == 1


def test_a_library_without_mallopt_leaves_malloc_as_it_is():
    assert limit_arenas(library="libdoes-not-exist.so") is False


def test_the_exporter_limits_the_arenas_before_its_threads_start(monkeypatch):
    from gpuwait import cli

    calls = []

    class Stop(Exception):
        pass

    def sampler(*args, **kwargs):
        calls.append("sampler")
        raise Stop

    monkeypatch.setattr(cli, "limit_arenas", lambda: calls.append("limit") or True)
    monkeypatch.setattr(cli, "Sampler", sampler)
    with pytest.raises(Stop):
        cli.main(["--web.listen-address=127.0.0.1:0"])
    assert calls == ["limit", "sampler"]
