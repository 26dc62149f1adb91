"""The bench's node writer: one writer per tree, so that its counters only go forward."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

BIGNODE = pathlib.Path(__file__).resolve().parents[2] / "bench" / "bignode.py"


def _stat_total(tree: pathlib.Path) -> int:
    return sum(map(int, (tree / "proc" / "stat").read_text().split("\n", 1)[0].split()[1:]))


def test_a_second_writer_on_a_tree_refuses_and_the_first_keeps_counting(tmp_path):
    tree = tmp_path / "node"
    subprocess.run([sys.executable, str(BIGNODE), "build", str(tree), "--size", "small"], check=True,
                   stdout=subprocess.DEVNULL)
    first = subprocess.Popen([sys.executable, str(BIGNODE), "write", str(tree), "--period", "0.05"])
    try:
        # Counters that moved: the first writer holds the tree.
        built, deadline = _stat_total(tree), time.monotonic() + 30
        while _stat_total(tree) == built and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run([sys.executable, str(BIGNODE), "write", str(tree)], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2
        assert "another writer is running" in second.stderr
        before = _stat_total(tree)
        time.sleep(0.5)
        assert first.poll() is None and _stat_total(tree) > before
    finally:
        first.terminate()
        first.wait(30)
    # Once the first is gone, a writer may start again.
    again = subprocess.Popen([sys.executable, str(BIGNODE), "write", str(tree)])
    try:
        time.sleep(0.5)
        assert again.poll() is None
    finally:
        again.terminate()
        assert again.wait(30) == 0
