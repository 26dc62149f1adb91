"""A cgroup v2 child with a CPU bandwidth limit (cpu.max) for the cpu_quota phase.

The kernel's cgroup v2 interface (Documentation/admin-guide/cgroup-v2.rst): a child cgroup has
the ``cpu.max`` file only when its parent lists ``cpu`` in ``cgroup.subtree_control``; writing
``$QUOTA $PERIOD`` there lets the group's tasks run at most QUOTA microseconds per PERIOD
(Documentation/scheduler/sched-bwc.rst), after which they are throttled until the period ends;
``cpu.stat`` counts the periods (``nr_periods``), those that ran out (``nr_throttled``) and the
time spent throttled (``throttled_usec``). The group is made beside the nearest ancestor of this
process's cgroup that already delegates the cpu controller; nothing else of the tree is
changed. Where no such place is writable the phase is skipped with the reason.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

#: The kernel's default CFS bandwidth period (sched-bwc.rst: cpu.max's default "max 100000").
PERIOD_US = 100_000


class Unavailable(Exception):
    """No cgroup v2 place where a CPU quota can be set; the message says why."""


def cgroup2_mount(mountinfo: str) -> str | None:
    """The mount point of the cgroup v2 hierarchy (``/sys/fs/cgroup``, or
    ``/sys/fs/cgroup/unified`` on a hybrid v1/v2 host) from /proc/self/mountinfo's text."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" in fields:
            sep = fields.index("-")
            if sep + 1 < len(fields) and fields[sep + 1] == "cgroup2" and len(fields) > 4:
                return fields[4]
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from /proc/self/cgroup (the ``0::PATH`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def find_parent(mount: str, path: str) -> str:
    """The directory to create the limited group in: the nearest cgroup, from this process's
    own up to the root, whose subtree_control already lists ``cpu`` and that can be written."""
    controllers = _read(os.path.join(mount, "cgroup.controllers"))
    if controllers is None:
        raise Unavailable(f"{mount} has no cgroup.controllers: not a cgroup v2 hierarchy")
    if "cpu" not in controllers.split():
        raise Unavailable(f"the cgroup v2 hierarchy at {mount} has no cpu controller (cgroup.controllers:"
                          f" {controllers.strip() or 'none'}); on a hybrid host it is bound to cgroup v1")
    parts = [p for p in path.split("/") if p]
    tried = []
    for depth in range(len(parts), -1, -1):
        directory = os.path.join(mount, *parts[:depth])
        enabled = (_read(os.path.join(directory, "cgroup.subtree_control")) or "").split()
        if "cpu" not in enabled:
            tried.append(f"{directory} does not delegate cpu")
            continue
        if not os.access(directory, os.W_OK):
            tried.append(f"{directory} is not writable")
            continue
        return directory
    raise Unavailable("no cgroup where a child can get cpu.max: " + "; ".join(tried))


@dataclass
class QuotaGroup:
    path: str
    cores: float

    @classmethod
    def create(cls, cores: float, name: str, mountinfo_path: str = "/proc/self/mountinfo",
               cgroup_path: str = "/proc/self/cgroup") -> "QuotaGroup":
        mount = cgroup2_mount(_read(mountinfo_path) or "")
        if mount is None:
            raise Unavailable("no cgroup v2 hierarchy is mounted (cgroup2 in /proc/self/mountinfo)")
        own = own_cgroup(_read(cgroup_path) or "")
        if own is None:
            raise Unavailable("this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)")
        parent = find_parent(mount, own)
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError as e:
            raise Unavailable(f"cannot create {path}: {e.strerror}") from None
        group = cls(path, cores)
        try:
            with open(os.path.join(path, "cpu.max"), "w") as f:
                f.write(f"{round(cores * PERIOD_US)} {PERIOD_US}\n")
        except OSError as e:
            group.remove()
            raise Unavailable(f"cannot set {path}/cpu.max: {e.strerror}") from None
        return group

    def enter(self) -> None:
        """Moves the calling process into the group; run in the child before it executes the
        workload (Popen's preexec_fn), so that every process it starts is inside too."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(f"{os.getpid()}\n")

    def stat(self) -> dict[str, int]:
        out = {}
        for line in (_read(os.path.join(self.path, "cpu.stat")) or "").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        return out

    def remove(self, timeout: float = 10.0) -> None:
        """Removes the group once its processes have gone (rmdir fails with EBUSY before)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
