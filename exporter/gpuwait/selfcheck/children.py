"""The self-check's child processes: the real exporter (``python -m gpuwait``) recording a
trace, and the phase driver; both started, watched and stopped by their pids."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from prometheus_client.parser import text_string_to_metric_families

#: metric name -> [(labels, value)]
Metrics = dict[str, list[tuple[dict[str, str], float]]]


class ChildError(Exception):
    """A child could not start, or stopped; the message says why, with its log; ``who`` is
    "exporter" or "workload"."""

    def __init__(self, who: str, message: str) -> None:
        super().__init__(message)
        self.who = who


def package_root() -> str:
    """The directory the running gpuwait package is imported from: the children run the same
    code (a source tree with PYTHONPATH=exporter, or an installed package)."""
    import gpuwait

    return os.path.dirname(os.path.dirname(os.path.abspath(gpuwait.__file__)))


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = package_root() + (os.pathsep + existing if existing else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def parse_metrics(text: str) -> Metrics:
    out: Metrics = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _end(proc: subprocess.Popen, grace: float) -> int:
    """SIGTERM to the child, then SIGKILL to its whole process group (it leads one of its own)
    if anything of it is left after ``grace``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group: e.g. DataLoader workers
    except (ProcessLookupError, PermissionError):
        pass
    return proc.wait()


class Exporter:
    """``python -m gpuwait`` on 127.0.0.1 with the given flags, its output in ``log_path``."""

    def __init__(self, args: Sequence[str], log_path: str, env: dict[str, str]) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.ready_at = 0.0

    def start(self, timeout: float = 30.0) -> "Exporter":
        for attempt in range(3):
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            with open(self.log_path, "a") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{port}", *self.args],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                code = self.proc.poll()
                if code is not None:
                    if code == 1 and "cannot listen" in tail(self.log_path, 3) and attempt < 2:
                        break  # the port was taken between choosing and binding it
                    raise ChildError("exporter", f"the exporter exited with code {code} at start:\n{tail(self.log_path)}")
                if self._ready():
                    self.ready_at = time.monotonic()
                    return self
                time.sleep(0.1)
            else:
                self.stop()
                raise ChildError("exporter", f"the exporter was not ready after {timeout:g} s:\n{tail(self.log_path)}")
        raise ChildError("exporter", f"the exporter could not listen:\n{tail(self.log_path)}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def scrape(self) -> Metrics:
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
                return parse_metrics(response.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError) as e:
            code = self.proc.poll() if self.proc else None
            state = f"it exited with code {code}" if code is not None else "it still runs"
            raise ChildError("exporter", f"scraping the exporter failed ({getattr(e, 'reason', e)}); {state}:\n{tail(self.log_path)}") from None

    def stop(self) -> int | None:
        return _end(self.proc, 15.0) if self.proc else None


class Workload:
    """The phase driver: started, read until it is ready (or says why it cannot be), then
    left to run until stopped. Its stdout carries the protocol's JSON lines; its stderr goes
    to ``log_path``."""

    def __init__(self, argv: Sequence[str], log_path: str, env: dict[str, str],
                 preexec: Callable[[], None] | None = None) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        with open(log_path, "a") as log:
            try:
                self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                             env=env, text=True, start_new_session=True, preexec_fn=preexec)
            except (OSError, subprocess.SubprocessError) as e:
                raise ChildError("workload", f"cannot start the workload {' '.join(self.argv)}: {e}") from None
        self.events: list[dict] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def next_event(self, timeout: float) -> dict:
        """The next protocol line, or a ChildError when it exits or stays silent."""
        import selectors

        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChildError("workload", f"the workload said nothing for {timeout:g} s:\n{tail(self.log_path)}")
                if not selector.select(min(left, 1.0)):
                    continue
                line = self.proc.stdout.readline()
                if not line:
                    code = self.proc.wait()
                    raise ChildError("workload", f"the workload exited with code {code}:\n{tail(self.log_path)}")
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # not a protocol line: library output on stdout
                if isinstance(event, dict) and "event" in event:
                    self.events.append(event)
                    return event

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        code = _end(self.proc, 15.0)
        if self.proc.stdout:
            self.proc.stdout.close()
        return code


def read_counters(path: str) -> tuple[float, dict[str, float]] | None:
    """(monotonic time, cumulative counters) from the workload's counters file."""
    try:
        with open(path) as f:
            data = json.load(f)
        return float(data["t"]), {k: float(v) for k, v in data["counters"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user and system) of a process and its living descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total
