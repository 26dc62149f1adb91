"""The real exporter process run as the DaemonSet runs it (tests/support/pod_exec.py does the setup):
its own mount namespace, the host's /proc and /sys read-only under /host, a chosen user and
capabilities, and optionally a network namespace of its own (no hostNetwork)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from gpuwait.core.registry import registry
from support import REPO, ExporterProcess

POD_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pod_exec.py")


def only_collectors(*names: str) -> list[str]:
    return [f"--no-collector.{c.name}" for c in registry() if c.name not in names]


class PodExporter(ExporterProcess):
    """``netns`` names a namespace of ``ip netns`` to run in (else the host's network, as with
    hostNetwork: true), ``address`` the address to listen on there. ``stages`` binds host
    directories read-only at {view}/stage/NAME, for files the exporter must read as its user."""

    def __init__(self, args: Sequence[str] = (), *, user: int = 65534, caps: Sequence[str] = (),
                 netns: str | None = None, address: str = "127.0.0.1", stages: dict[str, str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(args, env=env)
        self.user = user
        self.caps = tuple(caps)
        self.netns = netns
        self.address = address
        self.stages = {"py": sys.base_prefix, "repo": REPO, **(stages or {})}
        # The mount point exists on the host; the namespace mounts its own tmpfs over it.
        self.view = tempfile.mkdtemp(prefix="gpuwait-pod-", dir="/tmp")

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def python(self) -> str:
        return f"{{view}}/stage/py/bin/python{sys.version_info.major}.{sys.version_info.minor}"

    def command(self) -> tuple[list[str], dict[str, str], str]:
        cmd = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        cmd += ["unshare", "--mount", "--propagation", "private", "--", sys.executable, POD_EXEC,
                "--view", self.view, "--user", str(self.user), "--caps", ",".join(self.caps)]
        for name, path in self.stages.items():
            cmd += ["--stage", f"{name}={path}"]
        cmd += ["--", self.python, "-m", "gpuwait", f"--web.listen-address={self.address}:{self.port}",
                "--path.procfs={view}/host/proc", "--path.sysfs={view}/host/sys", *self.args]
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": "{view}/stage/repo/exporter",
            "LD_LIBRARY_PATH": "{view}/stage/py/lib",  # an interpreter built --enable-shared finds its libpython
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.env,
        }
        return cmd, env, "/"

    def run_inside(self, argv: Sequence[str]) -> subprocess.CompletedProcess:
        """Run ``argv`` in the exporter's mount namespace with the exporter's user and
        capabilities ({view} is its view's root)."""
        sets = "-all" + "".join(f",+{cap}" for cap in self.caps)
        cmd = ["nsenter", "-t", str(self.proc.pid), "-m", "--", "setpriv", f"--reuid={self.user}",
               f"--regid={self.user}", "--clear-groups", f"--inh-caps={sets}", f"--ambient-caps={sets}",
               f"--bounding-set={sets}", "--no-new-privs", "--", *(a.replace("{view}", self.view) for a in argv)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)

    def stop(self) -> int | None:
        code = super().stop()
        # The namespace went with the process, and its tmpfs with it: on the host the
        # directory is empty (rmdir, not a recursive delete, should that ever not hold).
        try:
            os.rmdir(self.view)
        except OSError:
            pass
        return code
