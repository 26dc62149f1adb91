#!/usr/bin/env python3
"""The local gpuwait stack without Docker: simulated exporters, Debian's ``prometheus`` and
``prometheus-alertmanager`` (and Grafana when ``grafana-server`` is installed), all on
loopback, with the configs of deploy/local and alerts/.

    sudo apt-get install prometheus prometheus-alertmanager
    python3 deploy/local/stack.py                         # one node, network_allreduce
    python3 deploy/local/stack.py --scenario storage --nodes 3
    python3 deploy/local/stack.py --straggler-job         # three nodes of one job, the last slow

Prometheus reads deploy/local/prometheus/prometheus.yml unchanged from a working directory
that holds its target files (exporters, Alertmanager) and a link to alerts/; the stack test
(tests/test_stack.py) starts the same pieces through this module. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROMETHEUS_CONFIG = HERE / "prometheus" / "prometheus.yml"
ALERTS = REPO / "alerts"
ALERTMANAGER_CONFIG = ALERTS / "alertmanager.yml"
DASHBOARDS = REPO / "dashboards" / "json"
GRAFANA_PROVISIONING = HERE / "grafana" / "provisioning"


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: each socket is held until all are chosen, since a port
    let go can be handed out again by a later bind (two exporters on one port would answer
    as one target)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find_binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if path:
            return path
    raise FileNotFoundError(f"none of {', '.join(names)} is installed (apt-get install prometheus prometheus-alertmanager)")


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")


def write_targets(path: pathlib.Path, targets: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump([{"targets": list(targets)}]))
    tmp.replace(path)  # file_sd must never read a half-written file


def prometheus_workdir(workdir: pathlib.Path, exporters: Sequence[str], alertmanagers: Sequence[str],
                       rules: pathlib.Path = ALERTS, interval: str | None = None) -> pathlib.Path:
    """A directory laid out as prometheus.yml expects; returns the config file's path.

    ``interval`` replaces the scrape and evaluation intervals (the test runs on seconds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    if interval:
        config["global"]["scrape_interval"] = config["global"]["evaluation_interval"] = interval
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    link = workdir / "alerts"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(rules.resolve(), target_is_directory=True)
    write_targets(workdir / "targets" / "exporters.yml", exporters)
    write_targets(workdir / "alertmanagers" / "local.yml", alertmanagers)
    return path


@dataclass
class Process:
    name: str
    proc: subprocess.Popen
    url: str
    log: pathlib.Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _spawn(name: str, cmd: list[str], logdir: pathlib.Path, env: dict | None = None) -> tuple[subprocess.Popen, pathlib.Path]:
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"{name}.log"
    handle = open(log, "ab")
    try:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=logdir)
    finally:
        handle.close()
    return proc, log


def start_exporter(name: str, port: int, scenario: str, logdir: pathlib.Path, params: str = "",
                   extra: Sequence[str] = ()) -> Process:
    cmd = [sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{port}", "--simulate", scenario, *extra]
    if params:
        cmd += ["--simulate.params", params]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "exporter"), env.get("PYTHONPATH", "")]))
    proc, log = _spawn(name, cmd, logdir, env)
    p = Process(name, proc, f"http://127.0.0.1:{port}", log)
    wait_ready(p.url + "/metrics", proc)
    return p


def start_prometheus(config: pathlib.Path, port: int, data: pathlib.Path, logdir: pathlib.Path) -> Process:
    cmd = [find_binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data}",
           f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"]
    proc, log = _spawn("prometheus", cmd, logdir)
    p = Process("prometheus", proc, f"http://127.0.0.1:{port}", log)
    wait_ready(p.url + "/-/ready", proc)
    return p


def start_alertmanager(config: pathlib.Path, port: int, data: pathlib.Path, logdir: pathlib.Path) -> Process:
    cmd = [find_binary("prometheus-alertmanager", "alertmanager"), f"--config.file={config}",
           f"--storage.path={data}", f"--web.listen-address=127.0.0.1:{port}",
           "--cluster.listen-address="]  # one instance: no gossip port to collide with
    proc, log = _spawn("alertmanager", cmd, logdir)
    p = Process("alertmanager", proc, f"http://127.0.0.1:{port}", log)
    wait_ready(p.url + "/-/ready", proc)
    return p


def start_grafana(workdir: pathlib.Path, port: int, prometheus_url: str, logdir: pathlib.Path) -> Process:
    """Grafana with the repository's provisioning, its datasource pointed at ``prometheus_url``."""
    binary = find_binary("grafana-server", "grafana")
    provisioning = workdir / "grafana" / "provisioning"
    if provisioning.exists():
        shutil.rmtree(provisioning)
    shutil.copytree(GRAFANA_PROVISIONING, provisioning)
    ds_file = provisioning / "datasources" / "gpuwait.yml"
    ds = yaml.safe_load(ds_file.read_text())
    ds["datasources"][0]["url"] = prometheus_url
    ds_file.write_text(yaml.safe_dump(ds, sort_keys=False))
    dash_file = provisioning / "dashboards" / "gpuwait.yml"
    dash = yaml.safe_load(dash_file.read_text())
    dash["providers"][0]["options"]["path"] = str(DASHBOARDS)
    dash_file.write_text(yaml.safe_dump(dash, sort_keys=False))
    env = dict(os.environ, GF_PATHS_PROVISIONING=str(provisioning), GF_PATHS_DATA=str(workdir / "grafana" / "data"),
               GF_SERVER_HTTP_ADDR="127.0.0.1", GF_SERVER_HTTP_PORT=str(port),
               GF_AUTH_ANONYMOUS_ENABLED="true", GF_AUTH_ANONYMOUS_ORG_ROLE="Viewer",
               GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=str(DASHBOARDS / "triage.json"))
    cmd = [binary] + (["server"] if binary.endswith("/grafana") else [])
    home = next((p for p in ("/usr/share/grafana", "/usr/local/share/grafana") if os.path.isdir(p)), None)
    if home:
        cmd += ["--homepath", home]
    proc, log = _spawn("grafana", cmd, logdir, env)
    p = Process("grafana", proc, f"http://127.0.0.1:{port}", log)
    wait_ready(p.url + "/api/health", proc, timeout=60)
    return p


@dataclass
class Stack:
    workdir: pathlib.Path
    processes: list[Process] = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="network_allreduce", help="simulated scenario of every node (default %(default)s)")
    ap.add_argument("--nodes", type=int, default=1, help="simulated nodes, one exporter each (default %(default)s)")
    ap.add_argument("--straggler-job", action="store_true",
                    help="three nodes of one multi-node job (node_straggler), the last one slower than the others")
    ap.add_argument("--exporter-port", type=int, default=9975, help="port of the first exporter; the others follow")
    ap.add_argument("--prometheus-port", type=int, default=9090)
    ap.add_argument("--alertmanager-port", type=int, default=9093)
    ap.add_argument("--grafana-port", type=int, default=3000)
    ap.add_argument("--no-grafana", action="store_true", help="do not start Grafana even when it is installed")
    ap.add_argument("--workdir", type=pathlib.Path, help="where data and logs go (default: a new temporary directory)")
    args = ap.parse_args(argv)

    # A plain kill must stop the children too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    workdir = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="gpuwait-stack-"))
    stack = Stack(workdir)
    logs = workdir / "logs"
    try:
        if args.straggler_job:
            args.scenario, args.nodes = "node_straggler", max(args.nodes, 3)
        ports = [args.exporter_port + i for i in range(args.nodes)]
        for i, port in enumerate(ports):
            # Distinct seeds: distinct GPU UUIDs per node; the simulated job is the same everywhere.
            params = f"seed={i + 1}"
            if args.straggler_job and i == len(ports) - 1:
                params += ",node_slowdown=0.4"
            stack.processes.append(start_exporter(f"exporter-{i}", port, args.scenario, logs, params=params))
        am = start_alertmanager(ALERTMANAGER_CONFIG, args.alertmanager_port, workdir / "alertmanager", logs)
        stack.processes.append(am)
        config = prometheus_workdir(workdir / "prometheus", [f"127.0.0.1:{p}" for p in ports],
                                    [f"127.0.0.1:{args.alertmanager_port}"])
        prom = start_prometheus(config, args.prometheus_port, workdir / "prometheus" / "data", logs)
        stack.processes.append(prom)
        print(f"exporters:    {', '.join(f'http://127.0.0.1:{p}/metrics' for p in ports)} ({args.scenario})")
        print(f"Prometheus:   {prom.url}")
        print(f"Alertmanager: {am.url}")
        if not args.no_grafana:
            try:
                grafana = start_grafana(workdir, args.grafana_port, prom.url, logs)
            except FileNotFoundError:
                print("Grafana:      not installed; see docs/local-stack.md (or use docker compose)")
            else:
                stack.processes.append(grafana)
                print(f"Grafana:      {grafana.url} (home: gpuwait / Triage)")
        print(f"logs and data in {workdir}; Ctrl-C stops the stack")
        while all(p.proc.poll() is None for p in stack.processes):
            time.sleep(1)
        dead = [p for p in stack.processes if p.proc.poll() is not None]
        for p in dead:
            print(f"{p.name} exited with {p.proc.returncode}:\n{p.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
