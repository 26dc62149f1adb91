"""Shared by the tests of the collectors that read the host's procfs (pressure, diskstats,
netdev): a private copy of the fixture host tree the test may rewrite under a running
exporter, the flags that point the exporter at it, and promtool's verdict on what it serves."""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import subprocess

from conftest import HOST_TREE
from support import value

#: Fast sampling and a short window, so window statistics move within a second of a rewrite.
QUICK = ("--sample.interval=50ms", "--analysis.interval=100ms", "--analysis.window=3s")


def copy_procfs(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the fixture host's procfs; its sysfs is only read, so it is not copied."""
    procfs = tmp_path / "proc"
    shutil.copytree(HOST_TREE / "proc", procfs, symlinks=True)
    return procfs


def exporter_args(procfs: pathlib.Path) -> list[str]:
    return [f"--path.procfs={procfs}", f"--path.sysfs={HOST_TREE / 'sys'}", *QUICK]


def rewrite(path: pathlib.Path, text: str) -> None:
    """Replace a file whole, as the kernel's pseudo-files change: a reader sees the old text
    or the new one, never half of each."""
    staging = path.with_name(path.name + ".new")
    staging.write_text(text)
    os.replace(staging, path)


def promtool_problems(exposition: str) -> str:
    """What ``promtool check metrics`` says about the text; empty when it is clean."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (.ci/run does)"
    result = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60)
    return "" if result.returncode == 0 and not result.stdout and not result.stderr else result.stdout + result.stderr


def exposed(samples, name: str, **labels) -> float:
    """The value of one series that must be there."""
    v = value(samples, name, **labels)
    assert v is not None and not math.isnan(v), f"{name}{labels} absent; have {sorted(samples)}"
    return v
