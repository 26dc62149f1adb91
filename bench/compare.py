"""gpuwait against node_exporter on one big-node tree, side by side, in one command.

    python3 bench/compare.py [--size big] [--cores N] [--duration 180] [--scrape-interval 5] [--repeats 3]

Builds the tree (bench/bignode.py), starts the writer that keeps its counters moving, then,
per repeat: gpuwait at its default settings (10 Hz fast tier, every default collector, the
GPUs through the NVML test double), gpuwait without its gpu collector (the same ground as
node_exporter covers), and Debian's prometheus-node-exporter with the comparable collectors,
all on the same --path.procfs/--path.sysfs. Each is scraped every --scrape-interval for
--duration seconds, one after the other. Reported per exporter: CPU seconds per wall second
(utime+stime of /proc/<pid>/stat over the measured span, after a warm-up of one analysis
window), peak (VmHWM) and final RSS, scrape latency p50/p99, exposition bytes and series;
for gpuwait also its own sampler tick and analysis cost as it measures them. Then the
ratios gpuwait/node_exporter with their spread (min..max) over the repeats.

Every process started is ended by its pid, whatever happens. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))
sys.path.insert(0, str(REPO / "bench"))

import bignode  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
NODE_EXPORTER_COLLECTORS = ("cpu", "stat", "pressure", "diskstats", "netdev", "infiniband", "mountstats")
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: gpuwait's default window: its statistics are complete, and its rings full, after this.
WARM_UP = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: every thread of the process


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


@dataclass
class Exporter:
    name: str
    cmd: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    latencies: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    series: list[int] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)
    cpu_start: float = 0.0
    wall_start: float = 0.0
    last_text: str = ""

    def start(self, log_dir: pathlib.Path) -> None:
        log = open(log_dir / f"{self.name}.log", "w")
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                     cwd=REPO, start_new_session=True)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url(), timeout=2) as r:
                    r.read()
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} not answering after {timeout}s")

    def scrape(self, keep: bool) -> None:
        started = time.perf_counter()
        with urllib.request.urlopen(self.url(), timeout=30) as r:
            body = r.read()
        elapsed = time.perf_counter() - started
        self.rss_kib.append(status_kib(self.proc.pid, "VmRSS"))
        if keep:
            self.latencies.append(elapsed)
            self.sizes.append(len(body))
            self.series.append(sum(1 for line in body.splitlines() if line and not line.startswith(b"#")))
            self.last_text = body.decode()

    def mark(self) -> None:
        self.cpu_start = cpu_seconds(self.proc.pid)
        self.wall_start = time.monotonic()

    def result(self) -> dict:
        wall = time.monotonic() - self.wall_start
        lat = sorted(self.latencies)
        out = {
            "cpu_share": (cpu_seconds(self.proc.pid) - self.cpu_start) / wall,
            "rss_peak_mb": status_kib(self.proc.pid, "VmHWM") / 1024,
            "rss_final_mb": self.rss_kib[-1] / 1024,
            "scrape_p50_ms": 1000 * statistics.median(lat),
            "scrape_p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "bytes": self.sizes[-1],
            "series": self.series[-1],
        }
        if self.name.startswith("gpuwait"):
            out.update(self_costs(self.last_text))
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def self_costs(text: str) -> dict:
    """gpuwait's own figures: the mean read time of each source over the window (the fast
    ones make the 10 Hz tick) and the duration of the last analysis pass."""
    reads, intervals, analysis = {}, {}, None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "gpuwait_source_read_duration_seconds":
                reads[s.labels["source"]] = s.value
            elif s.name == "gpuwait_source_interval_seconds":
                intervals[s.labels["source"]] = s.value
            elif s.name == "gpuwait_analysis_duration_seconds":
                analysis = s.value
    fastest = min(intervals.values()) if intervals else 0.1
    tick = sum(v for k, v in reads.items() if intervals.get(k) == fastest and v == v)
    return {"tick_ms": 1000 * tick, "analysis_ms": 1000 * analysis if analysis is not None else float("nan"),
            "reads_ms": {k: round(1000 * v, 3) for k, v in sorted(reads.items()) if v == v}}


def exporters(tree: pathlib.Path) -> list[Exporter]:
    paths = [f"--path.procfs={tree / 'proc'}", f"--path.sysfs={tree / 'sys'}"]
    # The exporter of this checkout, whatever copy of gpuwait is installed.
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "exporter"), str(REPO / "tests" / "support" / "nvml_double"),
                                          os.environ.get("PYTHONPATH", "")]),
           "GPUWAIT_NVML_DOUBLE": str(tree / "gpus.yaml")}
    out = []
    for name, extra in (("gpuwait", []), ("gpuwait-host", ["--no-collector.gpu"])):
        port = free_port()
        out.append(Exporter(name, [sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{port}", *paths, *extra],
                            port, env))
    port = free_port()
    out.append(Exporter("node_exporter", [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", *paths,
                                          "--collector.disable-defaults", *(f"--collector.{c}" for c in NODE_EXPORTER_COLLECTORS)],
                        port))
    return out


def one_run(tree: pathlib.Path, duration: float, interval: float, warm_up: float, log_dir: pathlib.Path) -> dict:
    running = exporters(tree)
    try:
        for e in running:
            e.start(log_dir)
        for e in running:
            e.wait_ready()
        deadline = time.monotonic() + warm_up
        while time.monotonic() < deadline:
            for e in running:
                e.scrape(keep=False)
            time.sleep(interval)
        for e in running:
            e.mark()
        end = time.monotonic() + duration
        while time.monotonic() < end:
            slot = time.monotonic()
            for e in running:
                e.scrape(keep=True)
            time.sleep(max(0.0, interval - (time.monotonic() - slot)))
        return {e.name: e.result() for e in running}
    finally:
        for e in running:
            e.stop()


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3g}"
    return f"{statistics.mean(values):.3g} ({min(values):.3g}..{max(values):.3g})"


KEYS = ("cpu_share", "rss_peak_mb", "rss_final_mb", "scrape_p50_ms", "scrape_p99_ms", "bytes", "series")


def report(runs: list[dict], size: dict, args) -> None:
    names = list(runs[0])
    print(f"\n## {args.size}: {size['cores']} cores, {size['disks']} disks, {size['netdevs']} netdevs, "
          f"{size['hcas']} HCAs, {size['gpus']} GPUs, {size['nfs']} NFS mounts; {len(runs)} run(s) of "
          f"{args.duration:g}s, scrape every {args.scrape_interval:g}s")
    width = max(len(k) for k in KEYS) + 2
    print("".ljust(width) + "".join(n.rjust(30) for n in names))
    for key in KEYS:
        row = key.ljust(width)
        for n in names:
            vals = [r[n][key] for r in runs]
            row += (f"{100 * statistics.mean(vals):.3f}% of a core" if key == "cpu_share" else spread(vals)).rjust(30)
        print(row)
    for n in names:
        if "tick_ms" in runs[0][n]:
            print(f"{n}: fast tick {spread([r[n]['tick_ms'] for r in runs])} ms, analysis pass "
                  f"{spread([r[n]['analysis_ms'] for r in runs])} ms; reads (ms) {runs[-1][n]['reads_ms']}")
    print("\nratios to node_exporter (mean, min..max over runs):")
    for n in names:
        if n == "node_exporter":
            continue
        for key in KEYS:
            ratios = [r[n][key] / r["node_exporter"][key] for r in runs if r["node_exporter"][key]]
            print(f"  {n}/node_exporter {key}: {spread(ratios)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(bignode.SIZES), default="big")
    parser.add_argument("--duration", type=float, default=180.0, help="measured seconds per run (default 180)")
    parser.add_argument("--warm-up", type=float, default=WARM_UP, help="seconds before measuring (default 60)")
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, help="the size's layout with this many cores instead")
    parser.add_argument("--json", type=pathlib.Path, help="also write every run's figures here")
    args = parser.parse_args()
    if not shutil.which(NODE_EXPORTER):
        print(f"{NODE_EXPORTER} not found (Debian: apt-get install prometheus-node-exporter)", file=sys.stderr)
        return 2
    size = dict(bignode.SIZES[args.size], **({"cores": args.cores} if args.cores else {}))
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="gpuwait-bench-") as tmp:
        tree = pathlib.Path(tmp) / "node"
        bignode.build(tree, **size)
        writer = subprocess.Popen([sys.executable, str(REPO / "bench" / "bignode.py"), "write", str(tree)],
                                  start_new_session=True)
        runs = []
        try:
            for n in range(args.repeats):
                runs.append(one_run(tree, args.duration, args.scrape_interval, args.warm_up, pathlib.Path(tmp)))
                print(f"run {n + 1}/{args.repeats} done", file=sys.stderr)
        finally:
            writer.terminate()
            try:
                writer.wait(10)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait()
            for log in pathlib.Path(tmp).glob("*.log"):
                text = log.read_text(errors="replace")
                problems = [line for line in text.splitlines() if "level=error" in line or "Traceback" in line]
                if problems:
                    print(f"{log.stem} logged {len(problems)} error line(s), e.g.: {problems[0][:200]}", file=sys.stderr)
    report(runs, size, args)
    if args.json:
        args.json.write_text(json.dumps({"size": args.size, "layout": size, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
