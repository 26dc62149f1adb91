"""How legitimate scrapes fare under HTTP connection abuse: gpuwait against node_exporter.

    python3 bench/http_abuse.py [--cases baseline,slowloris,concurrent,wrong-password] [--duration 20] [--repeats 1] [--json FILE]

Each case runs against gpuwait (the cpu collector alone, every other one off, its web flags at
their defaults) and then against Debian's prometheus-node-exporter (--collector.disable-defaults
--collector.cpu), each started fresh for the case and listening on 127.0.0.1. The abuse comes
from a separate process (so that its threads do not share a GIL with the measuring client),
connecting from 127.0.0.1; the legitimate client connects from --legit-source (127.0.0.2) with a
new connection per scrape and --timeout (10 s) per scrape; a scrape that fails, or takes longer
than the timeout, counts as the timeout in its p50/p99 (ok_p50/ok_p99: the successful ones alone).

  baseline        --scrapes sequential scrapes of /metrics (at most --duration seconds): p50, p99, failures.
  slowloris       --slow-connections (500) connections, each trickling a request header one byte every
                  0.5 s, reopened as soon as the server closes it; a legitimate scrape every 0.5 s.
  concurrent      --concurrent (200) threads looping GET /metrics: count per status (200, 503, timeout,
                  reset...), p50/p99 of all; a "Prometheus" client scraping every 0.5 s beside them.
  wrong-password  both exporters given the same --web.config.file (user prometheus, bcrypt cost 12);
                  --flood (40) threads sending wrong passwords without pause; the legitimate client, with
                  the right password, scrapes every 0.5 s from 2 s after the flood began: its latencies,
                  and that of its first scrape (before any success can have been cached) apart.

Reported per case and exporter, besides: peak thread count, RSS and open file descriptors of the
server process (sampled every 0.2 s from /proc/<pid>; for node_exporter its OS threads, not its
goroutines), and its CPU seconds per wall second. Then
the ratios gpuwait/node_exporter (mean, min..max over --repeats).

Every process started is ended by its pid, whatever happens. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import collections
import errno
import http.client
import itertools
import json
import multiprocessing
import os
import pathlib
import platform
import queue
import resource
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import compare  # noqa: E402

CASES = ("baseline", "slowloris", "concurrent", "wrong-password")
USER, PASSWORD = "prometheus", "right-password"
BCRYPT_COST = 12
#: The slowloris request: never finished, the padding header grows one byte per trickle.
SLOW_HEADER = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: "
TRICKLE = 0.5
SCRAPE_EVERY = 0.5
FIRST_SCRAPE_AFTER = 2.0
MONITOR_EVERY = 0.2


def gpuwait_collectors() -> list[str]:
    from gpuwait.core.registry import registry
    return [c.name for c in registry()]


def make_exporters(web_config: pathlib.Path | None) -> list[compare.Exporter]:
    """gpuwait of this checkout with the cpu collector alone, and node_exporter with its cpu
    collector alone; both on a fresh free port of 127.0.0.1, both given ``web_config`` if any."""
    web = [f"--web.config.file={web_config}"] if web_config else []
    # An empty entry would put the working directory on the exporter's path.
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(compare.REPO / "exporter"), os.environ.get("PYTHONPATH")]))}
    off = [f"--no-collector.{name}" for name in gpuwait_collectors() if name != "cpu"]
    port = compare.free_port()
    gpuwait = compare.Exporter("gpuwait", [sys.executable, "-m", "gpuwait", f"--web.listen-address=127.0.0.1:{port}",
                                           *off, *web], port, env)
    port = compare.free_port()
    node = compare.Exporter("node_exporter", [compare.NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                                              "--collector.disable-defaults", "--collector.cpu", *web], port)
    return [gpuwait, node]


# -- one HTTP request -----------------------------------------------------------------------------

def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def request(port: int, timeout: float, source: str | None = None, authorization: str | None = None) -> tuple[str, float]:
    """One GET /metrics on a new connection: (outcome, seconds to the end of the body). The
    outcome is the status code, or timeout / reset / refused / error."""
    headers = {"Connection": "close"}
    if authorization:
        headers["Authorization"] = authorization
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        response.read()
        outcome = str(response.status)
    except (TimeoutError, socket.timeout):
        outcome = "timeout"
    except ConnectionRefusedError:
        outcome = "refused"
    except (ConnectionError, http.client.IncompleteRead):  # reset, broken pipe, RemoteDisconnected
        outcome = "reset"
    except (OSError, http.client.HTTPException):
        outcome = "error"
    finally:
        conn.close()
    return outcome, time.perf_counter() - started


def wait_answering(e: compare.Exporter, expect: str, timeout: float = 30.0) -> None:
    """Until /metrics answers ``expect`` (200; 401 where credentials are wanted, so that no
    success is cached before the case)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if e.proc.poll() is not None:
            raise RuntimeError(f"{e.name} exited with {e.proc.returncode}")
        if request(e.port, 2.0)[0] == expect:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{e.name} not answering {expect} after {timeout}s")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_figures(prefix: str, results: list[tuple[str, float]], timeout: float, ok: str = "200") -> dict:
    """Counts per outcome; p50/p99 where an outcome other than ``ok``, or one slower than the
    timeout, counts as the timeout; and p50/p99 of the successful ones alone."""
    counts = collections.Counter(outcome for outcome, _ in results)
    good = [t for outcome, t in results if outcome == ok and t <= timeout]
    charged = good + [timeout] * (len(results) - len(good))
    slow = counts.pop(ok, 0) - len(good)
    out = {f"{prefix}scrapes": len(results), f"{prefix}ok": len(good),
           f"{prefix}timeouts": counts.pop("timeout", 0) + slow, f"{prefix}failures": sum(counts.values()),
           **{f"{prefix}failed_{k}": v for k, v in sorted(counts.items())},
           f"{prefix}p50_ms": 1000 * percentile(charged, 0.5), f"{prefix}p99_ms": 1000 * percentile(charged, 0.99),
           f"{prefix}ok_p50_ms": 1000 * percentile(good, 0.5), f"{prefix}ok_p99_ms": 1000 * percentile(good, 0.99)}
    return out


# -- the server process, watched while a case runs ------------------------------------------------

class Monitor:
    """Peak threads, RSS and open descriptors of a process, and its CPU share, meanwhile."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = {"threads": 0, "rss_kib": 0, "fds": 0}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            now = {"threads": compare.status_kib(self.pid, "Threads"), "rss_kib": compare.status_kib(self.pid, "VmRSS"),
                   "fds": len(os.listdir(f"/proc/{self.pid}/fd"))}
        except OSError:
            return
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def _run(self) -> None:
        while not self.stopping.is_set():
            self._sample()
            self.stopping.wait(MONITOR_EVERY)

    def __enter__(self) -> Monitor:
        self.cpu_start, self.wall_start = compare.cpu_seconds(self.pid), time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(5)
        self._sample()
        try:
            self.cpu_share = (compare.cpu_seconds(self.pid) - self.cpu_start) / (time.monotonic() - self.wall_start)
        except OSError:
            self.cpu_share = float("nan")

    def figures(self) -> dict:
        return {"peak_threads": self.peak["threads"], "peak_rss_mb": self.peak["rss_kib"] / 1024,
                "peak_fds": self.peak["fds"], "cpu_share": self.cpu_share}


# -- the abuse, in a process of its own ------------------------------------------------------------

def slowloris(port: int, connections: int, duration: float) -> dict:
    """``connections`` connections trickling SLOW_HEADER, then padding, a byte every TRICKLE
    seconds; one the server closes (or answers) is reopened at once, one that fails to connect
    at the next trickle."""
    sel = selectors.DefaultSelector()
    conns: dict[socket.socket, list] = {}  # socket -> [bytes sent, connected]
    stats = collections.Counter()
    answers = collections.Counter()
    missing = 0

    def open_one() -> None:
        nonlocal missing
        try:
            s = socket.socket()
        except OSError:  # out of descriptors
            stats["connect_failed"] += 1
            missing += 1
            return
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            stats["connect_failed"] += 1
            missing += 1
            return
        stats["opened"] += 1
        conns[s] = [0, False]
        sel.register(s, selectors.EVENT_WRITE)

    def drop(s: socket.socket, why: str, reopen: bool = True) -> None:
        nonlocal missing
        sel.unregister(s)
        s.close()
        del conns[s]
        stats[why] += 1
        if reopen:
            open_one()
        else:
            missing += 1

    for _ in range(connections):
        open_one()
    deadline = time.monotonic() + duration
    next_trickle = time.monotonic()
    max_connected = 0
    try:
        while time.monotonic() < deadline:
            if time.monotonic() >= next_trickle:
                for s, state in list(conns.items()):
                    if not state[1]:
                        continue
                    try:
                        s.send(SLOW_HEADER[state[0]:state[0] + 1] or b"a")
                        state[0] += 1
                    except BlockingIOError:
                        pass
                    except OSError:
                        drop(s, "send_failed")
                retry, missing = missing, 0
                for _ in range(retry):
                    open_one()
                max_connected = max(max_connected, sum(1 for state in conns.values() if state[1]))
                next_trickle += TRICKLE
            for key, _ in sel.select(max(0.0, min(next_trickle, deadline) - time.monotonic())):
                s = key.fileobj
                if s not in conns:
                    continue
                state = conns[s]
                if not state[1]:
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        drop(s, "connect_failed", reopen=False)
                    else:
                        state[1] = True
                        sel.modify(s, selectors.EVENT_READ)
                    continue
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    drop(s, "reset_by_server")
                    continue
                if data:
                    answers[data.split(b"\r\n", 1)[0][:40].decode(errors="replace")] += 1
                    drop(s, "answered_by_server")
                else:
                    drop(s, "closed_by_server")
        connected = sum(1 for state in conns.values() if state[1])
        return {**{f"sl_{k}": v for k, v in sorted(stats.items())}, "sl_max_connected": max_connected,
                "sl_connected_at_end": connected, "sl_connecting_at_end": len(conns) - connected,
                "sl_answers": dict(answers)}
    finally:
        for s in list(conns):
            s.close()
        sel.close()


def threaded(threads: int, duration: float, timeout: float, one) -> list[tuple[str, float]]:
    """``threads`` threads calling ``one()`` until ``duration`` is over; every (outcome, seconds)."""
    deadline = time.monotonic() + duration
    results: list[tuple[str, float]] = []
    lock = threading.Lock()

    def loop() -> None:
        while time.monotonic() < deadline:
            result = one()
            # Kept at once: a thread still blocked when the join gives up keeps what it did.
            with lock:
                results.append(result)

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()) + timeout + 5)
    with lock:
        return list(results)


def abuse(kind: str, port: int, duration: float, options: dict, out) -> None:
    """The abusing process: says "started", then gives its figures when ``duration`` is over,
    or what went wrong, so that the parent does not wait out its timeout."""
    out.put(("started", None))
    try:
        run_abuse(kind, port, duration, options, out)
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))
        raise


def run_abuse(kind: str, port: int, duration: float, options: dict, out) -> None:
    timeout = options["timeout"]
    if kind == "slowloris":
        out.put(("done", slowloris(port, options["slow_connections"], duration)))
    elif kind == "concurrent":
        results = threaded(options["concurrent"], duration, timeout, lambda: request(port, timeout))
        counts = collections.Counter(outcome for outcome, _ in results)
        latencies = [t for _, t in results]
        out.put(("done", {"load_requests": len(results), "load_per_s": len(results) / duration,
                          **{f"load_{k}": v for k, v in sorted(counts.items())},
                          "load_p50_ms": 1000 * percentile(latencies, 0.5),
                          "load_p99_ms": 1000 * percentile(latencies, 0.99)}))
    elif kind == "wrong-password":
        tries = itertools.count()  # each try a different wrong password: no cache can help
        results = threaded(options["flood"], duration, timeout,
                           lambda: request(port, timeout, authorization=basic(USER, f"wrong-{next(tries)}")))
        counts = collections.Counter(outcome for outcome, _ in results)
        out.put(("done", {"flood_requests": len(results), "flood_per_s": len(results) / duration,
                          **{f"flood_{k}": v for k, v in sorted(counts.items())},
                          "flood_p50_ms": 1000 * percentile([t for _, t in results], 0.5)}))


class Abuser:
    """The abuse process, ended by its pid whatever happens."""

    def __init__(self, kind: str, port: int, duration: float, options: dict) -> None:
        context = multiprocessing.get_context("spawn")
        self.queue = context.Queue()
        self.duration, self.timeout = duration, options["timeout"]
        self.proc = context.Process(target=abuse, args=(kind, port, duration, options, self.queue), daemon=True)

    def __enter__(self) -> Abuser:
        self.proc.start()
        try:
            if self.queue.get(timeout=60)[0] != "started":
                raise RuntimeError("abuse process did not start")
        except queue.Empty:
            self.__exit__()
            raise RuntimeError("abuse process did not start within 60 s") from None
        except BaseException:
            # __exit__ is not called when __enter__ fails.
            self.__exit__()
            raise
        return self

    def result(self) -> dict:
        try:
            what, value = self.queue.get(timeout=self.duration + self.timeout + 30)
        except queue.Empty:
            raise RuntimeError("abuse process gave no figures") from None
        if what != "done":
            raise RuntimeError(f"abuse process failed: {value}")
        return value

    def __exit__(self, *exc) -> None:
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def scrape_every(port: int, until: float, args, authorization: str | None = None) -> list[tuple[str, float]]:
    """The legitimate client: a scrape every SCRAPE_EVERY seconds (at once after a slow one)."""
    out = []
    while time.monotonic() < until:
        slot = time.monotonic()
        out.append(request(port, args.timeout, args.legit_source, authorization))
        time.sleep(max(0.0, SCRAPE_EVERY - (time.monotonic() - slot)))
    return out


# -- the cases ------------------------------------------------------------------------------------

def case_baseline(e: compare.Exporter, args) -> dict:
    deadline = time.monotonic() + args.duration
    results = []
    while len(results) < args.scrapes and time.monotonic() < deadline:
        results.append(request(e.port, args.timeout, args.legit_source))
    return latency_figures("", results, args.timeout)


def case_under_abuse(kind: str, e: compare.Exporter, args) -> dict:
    options = {"timeout": args.timeout, "slow_connections": args.slow_connections, "concurrent": args.concurrent,
               "flood": args.flood}
    with Abuser(kind, e.port, args.duration, options) as abuser:
        until = time.monotonic() + args.duration
        if kind == "wrong-password":
            time.sleep(FIRST_SCRAPE_AFTER)
            authorization = basic(USER, PASSWORD)
            first = request(e.port, args.timeout, args.legit_source, authorization)
            legit = [first] + scrape_every(e.port, until, args, authorization)
            out = {"first_ok": int(first[0] == "200"), "first_ms": 1000 * first[1],
                   **latency_figures("legit_", legit, args.timeout)}
        else:
            prefix = "prom_" if kind == "concurrent" else "legit_"
            out = latency_figures(prefix, scrape_every(e.port, until, args), args.timeout)
        out.update(abuser.result())
    return out


def run_case(case: str, args, log_dir: pathlib.Path, web_config: pathlib.Path) -> dict:
    log_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for e in make_exporters(web_config if case == "wrong-password" else None):
        try:
            e.start(log_dir)
            wait_answering(e, "401" if case == "wrong-password" else "200")
            with Monitor(e.proc.pid) as monitor:
                figures = case_baseline(e, args) if case == "baseline" else case_under_abuse(case, e, args)
            out[e.name] = {**figures, **monitor.figures()}
        except (RuntimeError, OSError) as exc:
            log = (log_dir / f"{e.name}.log").read_text(errors="replace").strip().splitlines()[-5:]
            print(f"{case}: {e.name} failed: {exc}; its log ends: {log}", file=sys.stderr)
            out[e.name] = {"error": str(exc)}
        finally:
            e.stop()
        problems = [line for line in (log_dir / f"{e.name}.log").read_text(errors="replace").splitlines()
                    if "level=error" in line or "Traceback" in line]
        if problems:
            print(f"{case}: {e.name} logged {len(problems)} error line(s), e.g.: {problems[0][:200]}", file=sys.stderr)
    return out


# -- the report -----------------------------------------------------------------------------------

def number(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def ratio(a, b) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or a != a or b != b:
        return None
    if b == 0:
        return None if a == 0 else float("inf")
    return a / b


def report(runs: list[dict], args) -> None:
    names = ("gpuwait", "node_exporter")
    for case in args.cases:
        per_run = [r[case] for r in runs if case in r]
        keys = list(dict.fromkeys(k for r in per_run for n in names for k in r.get(n, {})))
        print(f"\n## {case}: {len(per_run)} run(s) of {args.duration:g}s"
              + {"baseline": f", up to {args.scrapes} sequential scrapes",
                 "slowloris": f", {args.slow_connections} trickling connections, a scrape every {SCRAPE_EVERY:g}s",
                 "concurrent": f", {args.concurrent} looping threads, a Prometheus scrape every {SCRAPE_EVERY:g}s",
                 "wrong-password": f", {args.flood} flooding threads, bcrypt cost {BCRYPT_COST}"}[case])
        width = max([len(k) for k in keys] + [10]) + 2
        print("".ljust(width) + "".join(n.rjust(24) for n in names) + "gpuwait/node_exporter".rjust(28))
        for key in keys:
            row = key.ljust(width)
            values = {n: [r.get(n, {}).get(key, "-") for r in per_run] for n in names}
            for n in names:
                vals = values[n]
                if all(isinstance(v, (int, float)) for v in vals):
                    cell = compare.spread([float(v) for v in vals]) if len(vals) > 1 else number(vals[0])
                else:
                    cell = " ".join(json.dumps(v) if isinstance(v, dict) else number(v) for v in vals)
                # A space before every cell: a mean with its spread can be wider than the column.
                row += " " + cell.rjust(23)
            ratios = [ratio(a, b) for a, b in zip(values["gpuwait"], values["node_exporter"])]
            row += " " + (compare.spread(ratios) if all(q is not None for q in ratios) else "-").rjust(27)
            print(row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per case and exporter (default 20)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=pathlib.Path, help="also write every run's figures here")
    parser.add_argument("--scrapes", type=int, default=200, help="baseline: sequential scrapes (default 200)")
    parser.add_argument("--slow-connections", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--flood", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=10.0, help="client timeout per scrape (default 10 s)")
    parser.add_argument("--legit-source", default="127.0.0.2", help="source address of the legitimate client")
    args = parser.parse_args()
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose among {','.join(CASES)}")
    if not shutil.which(compare.NODE_EXPORTER):
        print(f"{compare.NODE_EXPORTER} not found (Debian: apt-get install prometheus-node-exporter)", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.2f}; open files {soft} -> {hard}")
    import bcrypt
    runs = []
    with tempfile.TemporaryDirectory(prefix="gpuwait-abuse-") as tmp:
        web_config = pathlib.Path(tmp) / "web.yml"
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()
        web_config.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
        for n in range(args.repeats):
            run = {}
            for case in args.cases:
                run[case] = run_case(case, args, pathlib.Path(tmp) / f"run{n}" / case, web_config)
                print(f"run {n + 1}/{args.repeats}: {case} done", file=sys.stderr)
            runs.append(run)
    report(runs, args)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, pathlib.Path) else v)
                                                  for k, v in vars(args).items()}, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
