"""gpuwait and Debian's node_exporter read the same kernel files; their values must agree.

On this machine's real /proc and /sys, under load, both processes read the counters at
slightly different moments, so equality is not the test. Instead gpuwait is scraped before (A)
and after (B) node_exporter (N), and node_exporter's value must lie between A and B: a
monotonic counter read in between can be nothing else. The bracket is only meaningful if it is
narrow, so B - A is also bounded by the elapsed time times the counter's largest possible rate
where the kernel gives one (time counters).

On the fixture host tree the files do not change, so there every shared series, gauges and the
RDMA ports this machine lacks included, must be equal.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import pytest

from conftest import HOST_TREE
from fixture_host import QUICK_TIMING, only_collectors_flags
from gpuwait.catalog import CATALOG
from gpuwait.core.registry import registry
from support import ExporterProcess, free_port, parse_exposition, value

pytestmark = pytest.mark.integration

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
USER_HZ = os.sysconf("SC_CLK_TCK")
#: Both sides scale the same integers by the same constants; what remains is float formatting.
RELATIVE_EPSILON = 1e-9


@dataclass(frozen=True)
class Comparison:
    collector: str
    gpuwait: str
    node: str
    #: gpuwait label -> node_exporter label carrying the same value.
    labels: dict[str, str] = field(default_factory=dict)
    #: Only gpuwait series with these label values (node splits some families by name instead).
    where: dict[str, str] = field(default_factory=dict)
    #: node value x scale = gpuwait value (node_exporter counts discards in sectors).
    scale: float = 1.0
    #: Largest increase per second of elapsed time the kernel allows, to check that the
    #: bracket is narrow; None where no such physical bound exists (bytes, packets).
    max_rate: float | None = None
    #: Counters the kernel lets go backwards get this much slack (in seconds of elapsed time).
    may_go_backwards: bool = False
    #: gpuwait labels node_exporter lacks, that follow from the others (an RDMA device's link layer).
    ignore: tuple[str, ...] = ()
    #: A gauge read at two moments cannot be bracketed: compared on the fixture host only.
    gauge: bool = False


def _cpu(mode: str) -> Comparison:
    # A core spends at most one second per second in any one mode. idle and iowait are the
    # kernel's nohz estimates: proc(5) warns iowait can decrease, and time moves from iowait
    # to idle when the waiting task wakes elsewhere, by up to the current idle period.
    return Comparison("cpu", "gpuwait_cpu_seconds_total", "node_cpu_seconds_total", {"cpu": "cpu", "mode": "mode"},
                      where={"mode": mode}, max_rate=1.0, may_go_backwards=mode in ("idle", "iowait"))


def _disk(gpuwait: str, node: str, scale: float = 1.0, max_rate: float | None = None) -> Comparison:
    return Comparison("diskstats", gpuwait, node, {"device": "device"}, scale=scale, max_rate=max_rate)


def _net(gpuwait: str, node: str) -> Comparison:
    return Comparison("netdev", gpuwait, node, {"interface": "device"})


def _rdma(gpuwait: str, node: str, gauge: bool = False) -> Comparison:
    return Comparison("rdma", gpuwait, node, {"device": "device", "port": "port"}, ignore=("link_layer",), gauge=gauge)


def _psi(resource: str, scope: str, node: str) -> Comparison:
    # System-wide PSI is wall-clock time during which tasks stalled: at most 1 s per second.
    return Comparison("pressure", "gpuwait_pressure_stalled_seconds_total", node, where={"resource": resource, "scope": scope},
                      max_rate=1.0)


COMPARISONS = (
    *(_cpu(mode) for mode in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")),
    _disk("gpuwait_disk_reads_completed_total", "node_disk_reads_completed_total"),
    _disk("gpuwait_disk_writes_completed_total", "node_disk_writes_completed_total"),
    _disk("gpuwait_disk_reads_merged_total", "node_disk_reads_merged_total"),
    _disk("gpuwait_disk_writes_merged_total", "node_disk_writes_merged_total"),
    _disk("gpuwait_disk_read_bytes_total", "node_disk_read_bytes_total"),
    _disk("gpuwait_disk_write_bytes_total", "node_disk_written_bytes_total"),
    _disk("gpuwait_disk_read_time_seconds_total", "node_disk_read_time_seconds_total"),
    _disk("gpuwait_disk_write_time_seconds_total", "node_disk_write_time_seconds_total"),
    _disk("gpuwait_disk_discards_completed_total", "node_disk_discards_completed_total"),
    _disk("gpuwait_disk_discards_merged_total", "node_disk_discards_merged_total"),
    _disk("gpuwait_disk_discard_bytes_total", "node_disk_discarded_sectors_total", scale=512.0),
    _disk("gpuwait_disk_discard_time_seconds_total", "node_disk_discard_time_seconds_total"),
    _disk("gpuwait_disk_flushes_completed_total", "node_disk_flush_requests_total"),
    _disk("gpuwait_disk_flush_time_seconds_total", "node_disk_flush_requests_time_seconds_total"),
    # The device is busy at most all of the elapsed time.
    _disk("gpuwait_disk_io_time_seconds_total", "node_disk_io_time_seconds_total", max_rate=1.0),
    _disk("gpuwait_disk_io_time_weighted_seconds_total", "node_disk_io_time_weighted_seconds_total"),
    _net("gpuwait_network_receive_bytes_total", "node_network_receive_bytes_total"),
    _net("gpuwait_network_transmit_bytes_total", "node_network_transmit_bytes_total"),
    _net("gpuwait_network_receive_packets_total", "node_network_receive_packets_total"),
    _net("gpuwait_network_transmit_packets_total", "node_network_transmit_packets_total"),
    _net("gpuwait_network_receive_errors_total", "node_network_receive_errs_total"),
    _net("gpuwait_network_transmit_errors_total", "node_network_transmit_errs_total"),
    _net("gpuwait_network_receive_drops_total", "node_network_receive_drop_total"),
    _net("gpuwait_network_transmit_drops_total", "node_network_transmit_drop_total"),
    _psi("cpu", "some", "node_pressure_cpu_waiting_seconds_total"),
    _psi("io", "some", "node_pressure_io_waiting_seconds_total"),
    _psi("io", "full", "node_pressure_io_stalled_seconds_total"),
    _psi("memory", "some", "node_pressure_memory_waiting_seconds_total"),
    _psi("memory", "full", "node_pressure_memory_stalled_seconds_total"),
    _rdma("gpuwait_rdma_port_receive_bytes_total", "node_infiniband_port_data_received_bytes_total"),
    _rdma("gpuwait_rdma_port_transmit_bytes_total", "node_infiniband_port_data_transmitted_bytes_total"),
    _rdma("gpuwait_rdma_port_receive_packets_total", "node_infiniband_port_packets_received_total"),
    _rdma("gpuwait_rdma_port_transmit_packets_total", "node_infiniband_port_packets_transmitted_total"),
    _rdma("gpuwait_rdma_port_unicast_receive_packets_total", "node_infiniband_unicast_packets_received_total"),
    _rdma("gpuwait_rdma_port_unicast_transmit_packets_total", "node_infiniband_unicast_packets_transmitted_total"),
    _rdma("gpuwait_rdma_port_multicast_receive_packets_total", "node_infiniband_multicast_packets_received_total"),
    _rdma("gpuwait_rdma_port_multicast_transmit_packets_total", "node_infiniband_multicast_packets_transmitted_total"),
    _rdma("gpuwait_rdma_port_symbol_errors_total", "node_infiniband_symbol_error_total"),
    _rdma("gpuwait_rdma_port_link_error_recoveries_total", "node_infiniband_link_error_recovery_total"),
    _rdma("gpuwait_rdma_port_link_downed_total", "node_infiniband_link_downed_total"),
    _rdma("gpuwait_rdma_port_receive_errors_total", "node_infiniband_port_errors_received_total"),
    _rdma("gpuwait_rdma_port_receive_remote_physical_errors_total", "node_infiniband_port_receive_remote_physical_errors_total"),
    _rdma("gpuwait_rdma_port_receive_switch_relay_errors_total", "node_infiniband_port_receive_switch_relay_errors_total"),
    _rdma("gpuwait_rdma_port_transmit_discards_total", "node_infiniband_port_discards_transmitted_total"),
    _rdma("gpuwait_rdma_port_transmit_constraint_errors_total", "node_infiniband_port_constraint_errors_transmitted_total"),
    _rdma("gpuwait_rdma_port_receive_constraint_errors_total", "node_infiniband_port_constraint_errors_received_total"),
    _rdma("gpuwait_rdma_port_local_link_integrity_errors_total", "node_infiniband_local_link_integrity_errors_total"),
    _rdma("gpuwait_rdma_port_excessive_buffer_overrun_errors_total", "node_infiniband_excessive_buffer_overrun_errors_total"),
    _rdma("gpuwait_rdma_port_vl15_dropped_total", "node_infiniband_vl15_dropped_total"),
    _rdma("gpuwait_rdma_port_transmit_wait_ticks_total", "node_infiniband_port_transmit_wait_total"),
    _rdma("gpuwait_rdma_port_rate_bytes_per_second", "node_infiniband_rate_bytes_per_second", gauge=True),
    _rdma("gpuwait_rdma_port_state", "node_infiniband_state_id", gauge=True),
    _rdma("gpuwait_rdma_port_physical_state", "node_infiniband_physical_state_id", gauge=True),
    Comparison("diskstats", "gpuwait_disk_io_now", "node_disk_io_now", {"device": "device"}, gauge=True),
    Comparison("cpu", "gpuwait_procs_running", "node_procs_running", gauge=True),
    Comparison("cpu", "gpuwait_procs_blocked", "node_procs_blocked", gauge=True),
)

#: gpuwait collector -> the node_exporter collectors reading the same files.
NODE_COLLECTORS = {"cpu": ("cpu", "stat"), "diskstats": ("diskstats",), "netdev": ("netdev",),
                   "pressure": ("pressure",), "rdma": ("infiniband",)}
#: Compared live on this machine: the rest (RDMA) has no hardware here.
LIVE_COLLECTORS = ("cpu", "diskstats", "netdev", "pressure")
#: Counters of those collectors that node_exporter 1.5 does not have (it reads no hw_counters).
NO_NODE_EQUIVALENT = {"gpuwait_rdma_port_hw_events_total"}
#: gpuwait's fast tier, set explicitly because the bracket's width depends on it.
SAMPLE_INTERVAL = 0.1

REGISTERED = {c.name for c in registry()}
ACTIVE = [c for c in COMPARISONS if c.collector in REGISTERED]
#: The same device sets on both sides: nothing excluded, loopback included.
GPUWAIT_DEVICE_FLAGS = [f"--collector.{name}.device-exclude=^$" for name in ("diskstats", "netdev") if name in REGISTERED]


def test_every_shared_counter_is_compared():
    compared = {c.gpuwait for c in COMPARISONS}
    for name, spec in CATALOG.items():
        if spec.source in NODE_COLLECTORS and spec.type == "counter":
            assert name in compared or name in NO_NODE_EQUIVALENT, (
                f"{name}: add its node_exporter counterpart to COMPARISONS (or NO_NODE_EQUIVALENT)"
            )
    for comparison in ACTIVE:
        spec = CATALOG.get(comparison.gpuwait)
        assert spec is not None and spec.source == comparison.collector, f"{comparison.gpuwait} is not in the catalog"
        assert (spec.type == "gauge") == comparison.gauge, comparison.gpuwait
        assert set(comparison.labels) | set(comparison.where) | set(comparison.ignore) == set(spec.labels), comparison.gpuwait
    assert "cpu" in REGISTERED


# -- load --------------------------------------------------------------------------------------


class Load:
    """CPU burn in a child process, loopback TCP traffic and fsync'd writes, for a bounded time."""

    def __init__(self, directory, seconds: float) -> None:
        self.directory = directory
        self.deadline = time.monotonic() + seconds
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.burner: subprocess.Popen | None = None
        self.bytes_sent = 0
        self.bytes_written = 0

    def __enter__(self) -> "Load":
        budget = max(1, int(self.deadline - time.monotonic()) + 1)
        self.burner = subprocess.Popen(
            [sys.executable, "-c", f"import time\nend = time.monotonic() + {budget}\nwhile time.monotonic() < end: pass"])
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        self.threads = [
            threading.Thread(target=self._sink, args=(server,), daemon=True),
            threading.Thread(target=self._send, args=(server.getsockname(),), daemon=True),
            threading.Thread(target=self._write, daemon=True),
        ]
        for t in self.threads:
            t.start()
        return self

    def _running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def _sink(self, server: socket.socket) -> None:
        server.settimeout(5)
        with server:
            conn, _ = server.accept()
            with conn:
                while conn.recv(1 << 16):
                    pass

    def _send(self, address) -> None:
        chunk = b"x" * (1 << 16)
        with socket.create_connection(address, timeout=5) as conn:
            while self._running() and self.bytes_sent < (1 << 30):
                conn.sendall(chunk)
                self.bytes_sent += len(chunk)
                time.sleep(0.001)

    def _write(self) -> None:
        path = os.path.join(self.directory, "load.bin")
        block = os.urandom(1 << 16)
        with open(path, "wb") as f:
            # Paced, so that writes complete all through the comparison, not only at its start.
            while self._running() and self.bytes_written < (64 << 20):
                f.write(block)
                f.flush()
                os.fsync(f.fileno())
                self.bytes_written += len(block)
                time.sleep(0.01)
        os.unlink(path)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        if self.burner is not None:
            self.burner.kill()
            self.burner.wait()


# -- node_exporter -----------------------------------------------------------------------------


class NodeExporter:
    def __init__(self, collectors, *args: str) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.collectors = sorted({nc for c in collectors if c in REGISTERED for nc in NODE_COLLECTORS[c]})
        self.args = args
        # A file, not a pipe: nobody reads a pipe while the test runs, and a full one blocks.
        self.log = tempfile.TemporaryFile()

    def __enter__(self) -> "NodeExporter":
        if not os.path.exists(NODE_EXPORTER):
            pytest.fail(f"{NODE_EXPORTER} not found: install Debian's prometheus-node-exporter package (.ci/run does)")
        self.proc = subprocess.Popen(
            [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{self.port}", "--collector.disable-defaults",
             *(f"--collector.{name}" for name in self.collectors),
             "--collector.diskstats.device-exclude=^$", "--collector.netdev.device-exclude=^$",
             # /proc/net/dev rather than netlink, so both read the same file's columns (and
             # on the fixture host, the fixture's file rather than this machine's netlink).
             "--no-collector.netdev.netlink", *self.args],
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                pytest.fail(f"node_exporter exited with {self.proc.returncode}: {self.log.read().decode(errors='replace')}")
            try:
                self.scrape()
                return self
            except OSError:
                time.sleep(0.05)
        self.proc.kill()
        pytest.fail("node_exporter did not answer in 15 s")

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return parse_exposition(r.read().decode())

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def node_series(samples, c: Comparison) -> dict[tuple, float]:
    where = {c.labels[k]: v for k, v in c.where.items() if k in c.labels}
    return series(samples, c.node, where, list(c.labels.values()))


def where_labels(c: Comparison, key: tuple) -> str:
    return str({**c.where, **dict(zip(c.labels, key))})


def series(samples, name: str, where: dict[str, str], labels) -> dict[tuple, float]:
    """{values of the ``labels`` names, in order: value} of the samples of ``name`` matching ``where``."""
    out = {}
    for lbl, v in samples.get(name, []):
        if all(lbl.get(k) == w for k, w in where.items()):
            out[tuple(lbl[k] for k in labels)] = v
    return out


def sources_read(samples) -> dict[str, float]:
    return {lbl["source"]: v for lbl, v in samples.get("gpuwait_source_reads_total", [])}


def test_counters_agree_with_node_exporter_on_this_machine(tmp_path):
    live = [c for c in ACTIVE if c.collector in LIVE_COLLECTORS and not c.gauge]
    assert live, "no registered collector has a node_exporter counterpart"
    compared_sources = sorted({s.name for c in registry() if c.name in LIVE_COLLECTORS for s in c.sources})
    gpuwait_flags = [f"--sample.interval={SAMPLE_INTERVAL}s", *GPUWAIT_DEVICE_FLAGS, *only_collectors_flags(LIVE_COLLECTORS)]
    with ExporterProcess(gpuwait_flags) as gpuwait, NodeExporter(LIVE_COLLECTORS) as node, \
            Load(str(tmp_path), seconds=8.0) as load:
        time.sleep(1.0)  # the load is under way before anything is compared

        started = time.monotonic()
        a = gpuwait.scrape()
        n = node.scrape()
        after_n = sources_read(gpuwait.scrape())
        # B must hold readings that started after node_exporter's read: a source reads
        # sequentially, so its second read completed after this point started after it.
        b = gpuwait.wait_for(
            lambda s: s if all(sources_read(s).get(src, 0) >= after_n[src] + 3 for src in compared_sources) else None,
            timeout=10, interval=0.05)
        # A's readings may be one interval (plus scheduling lag) older than the A scrape.
        elapsed = time.monotonic() - started + SAMPLE_INTERVAL + 0.1
        assert load.bytes_sent > 0 and load.bytes_written > 0

    problems: list[str] = []
    checked = 0
    for c in live:
        ga = series(a, c.gpuwait, c.where, list(c.labels))
        gb = series(b, c.gpuwait, c.where, list(c.labels))
        nv = node_series(n, c)
        if set(nv) != set(ga) or set(ga) != set(gb):
            problems.append(f"{c.gpuwait}{c.where}: label sets differ: gpuwait {sorted(ga)} vs node {sorted(nv)}")
            continue
        for key, node_value in nv.items():
            lo, hi, mid = ga[key], gb[key], node_value * c.scale
            slack = RELATIVE_EPSILON * max(1.0, abs(mid))
            if c.may_go_backwards:
                slack += elapsed
            elif hi < lo - slack:
                problems.append(f"{c.gpuwait}{where_labels(c, key)}: went backwards in gpuwait: {lo} -> {hi}")
            if not (min(lo, hi) - slack <= mid <= max(lo, hi) + slack):
                problems.append(f"{c.gpuwait}{where_labels(c, key)}: node_exporter {mid} outside gpuwait's [{lo}, {hi}]")
            # Two ticks: each end of the bracket may have just missed a tick of USER_HZ.
            if c.max_rate is not None and abs(hi - lo) > c.max_rate * elapsed + 2.0 / USER_HZ + slack:
                problems.append(f"{c.gpuwait}{where_labels(c, key)}: advanced {hi - lo} in {elapsed:.2f}s")
            checked += 1
    assert not problems, "\n".join(problems)

    # The comparison covered real activity, not only zeros.
    cpu_user = series(b, "gpuwait_cpu_seconds_total", {"mode": "user"}, ["cpu"])
    assert sum(cpu_user.values()) > 0
    if "netdev" in REGISTERED:
        lo_a = value(a, "gpuwait_network_transmit_bytes_total", interface="lo")
        lo_b = value(b, "gpuwait_network_transmit_bytes_total", interface="lo")
        assert lo_a is not None and lo_b > lo_a, "loopback traffic during the comparison was not seen"
    if "diskstats" in REGISTERED:
        before = series(a, "gpuwait_disk_writes_completed_total", {}, ["device"])
        after = series(b, "gpuwait_disk_writes_completed_total", {}, ["device"])
        written = {k: v - before.get(k, v) for k, v in after.items()}
        assert any(v > 0 for v in written.values()), f"no device completed a write under fsync load: {written}"
    assert checked >= len(cpu_user) * 8


def test_everything_shared_is_equal_on_the_fixture_host():
    fixture = [f"--path.procfs={HOST_TREE / 'proc'}", f"--path.sysfs={HOST_TREE / 'sys'}"]
    collectors = [name for name in NODE_COLLECTORS if name in REGISTERED]
    gpuwait_flags = [*fixture, *QUICK_TIMING, *GPUWAIT_DEVICE_FLAGS, *only_collectors_flags(collectors)]
    with ExporterProcess(gpuwait_flags) as gpuwait, NodeExporter(collectors, *fixture) as node:
        g = gpuwait.scrape()
        n = node.scrape()
    problems: list[str] = []
    compared = set()
    for c in ACTIVE:
        gv = series(g, c.gpuwait, c.where, list(c.labels))
        nv = node_series(n, c)
        if set(gv) != set(nv):
            problems.append(f"{c.gpuwait}{c.where}: label sets differ: gpuwait {sorted(gv)} vs node {sorted(nv)}")
            continue
        for key, node_value in nv.items():
            expected = node_value * c.scale
            if abs(gv[key] - expected) > RELATIVE_EPSILON * max(1.0, abs(expected)):
                problems.append(f"{c.gpuwait}{where_labels(c, key)}: gpuwait {gv[key]}, node_exporter {expected}")
        if nv:
            compared.add(c.collector)
    assert not problems, "\n".join(problems)
    # The fixture host has something for every shared collector; an empty family on both
    # sides would otherwise pass unnoticed.
    assert compared == set(collectors), f"nothing compared for {set(collectors) - compared}"
