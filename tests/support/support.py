"""Running the real exporter process in tests, and reading what it serves."""

from __future__ import annotations

import atexit
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

#: The repository root (this file is tests/support/support.py).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_exposition(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{sample name: [(labels, value), ...]}; counters appear under their _total name."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    return samples


class ExporterProcess:
    """``with ExporterProcess(["--path.procfs", tree]) as exp: exp.scrape()``.

    ``env`` is merged into the environment (e.g. PYTHONPATH putting a test double of a
    library first). Output goes to a file so a failing test can show the log.
    """

    def __init__(self, args: Sequence[str] = (), env: dict[str, str] | None = None, ready_timeout: float = 20.0) -> None:
        self.port = free_port()
        self.args = list(args)
        self.env = env or {}
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.log_path = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str], str]:
        """(argv, environment, working directory) of the exporter process; subclasses that
        run it differently (under restrictions, say) override only this."""
        env = dict(os.environ)
        env.update(self.env)
        cmd = [sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{self.port}", *self.args]
        return cmd, env, REPO

    def __enter__(self) -> "ExporterProcess":
        import tempfile

        cmd, env, cwd = self.command()
        self._log = tempfile.NamedTemporaryFile(prefix="gpuwait-exporter-", suffix=".log", delete=False)
        self.log_path = self._log.name
        # Kept for the whole run, so that a test can read it after the exporter stopped.
        atexit.register(pathlib.Path(self.log_path).unlink, missing_ok=True)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exporter exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.get("/-/ready")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"exporter not ready after {self.ready_timeout}s:\n{self.log()}")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def log(self) -> str:
        if not self.log_path:
            return ""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def scrape_text(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, body
        return body

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        return parse_exposition(self.scrape_text())

    def wait_for(self, predicate, timeout: float = 15.0, interval: float = 0.1):
        """Scrape until predicate(samples) is truthy; returns its value or fails with the log."""
        deadline = time.monotonic() + timeout
        samples = {}
        while time.monotonic() < deadline:
            samples = self.scrape()
            result = predicate(samples)
            if result:
                return result
            time.sleep(interval)
        raise AssertionError(f"condition not met in {timeout}s; last scrape had {sorted(samples)}\nlog:\n{self.log()}")


def value(samples, name: str, **labels) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels``."""
    matches = [v for lbl, v in samples.get(name, []) if all(lbl.get(k) == str(w) for k, w in labels.items())]
    if len(matches) > 1:
        raise AssertionError(f"{name}{labels} matches {len(matches)} samples")
    return matches[0] if matches else None
