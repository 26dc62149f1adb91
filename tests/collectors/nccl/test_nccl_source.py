"""The nccl source on a real directory, with files appended, rotated, truncated and deleted
the way NCCL Inspector and log rotation do it, while the source reads."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from conftest import text_fixture
from fixture_host import inspector_line
from gpuwait.collectors.nccl import COLLECTOR
from gpuwait.collectors.nccl.source import NcclSource
from gpuwait.core.errors import ConfigError, NoData, SourceError
from gpuwait.core.registry import resolve
from gpuwait.core.source import HostPaths
from gpuwait.simulate.model import SCENARIOS
from gpuwait.simulate.node import SimulatedNode
from gpuwait.simulate.run import run_virtual
from gpuwait.simulate.table import default_settings


class Clocks:
    """A monotonic and a wall clock the test moves; the files' times stay the real ones."""

    def __init__(self, wall: float | None = None) -> None:
        self.mono = 1000.0
        self.wall = time.time() if wall is None else wall

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def source(dump, clocks: Clocks | None = None, **kw) -> NcclSource:
    clocks = clocks or Clocks()
    return NcclSource(HostPaths(), str(dump), clock=clocks.monotonic, wall_clock=clocks.time, **kw)


def totals(reading) -> dict[tuple, int]:
    return {(r.kind, r.comm, r.rank, r.pid): r.collectives_total for r in reading.data.ranks}


def lines(first: int, count: int, **kw) -> str:
    now = time.time()
    return "".join(inspector_line(seq, now, **kw) for seq in range(first, first + count))


class PluginWriter:
    """Writes a dump file the way the plugin's stdio stream does: opened with "w" (no
    O_APPEND), flushed at arbitrary points, so the reader meets lines cut anywhere."""

    def __init__(self, path, seed: int = 7) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self.random = random.Random(seed)
        self.seq = 0

    def write(self, count: int, **kw) -> None:
        data = lines(self.seq, count, **kw).encode()
        self.seq += count
        pos = 0
        while pos < len(data):
            cut = pos + self.random.randint(1, 700)
            os.write(self.fd, data[pos:cut])
            pos = cut
            if self.random.random() < 0.3:
                time.sleep(0.0005)

    def close(self) -> None:
        os.close(self.fd)


def read_while(src: NcclSource, busy: threading.Thread) -> list:
    readings = []
    while busy.is_alive():
        readings.append(src.read())
    readings.append(src.read())
    return readings


def in_background(fn, *args) -> threading.Thread:
    thread = threading.Thread(target=fn, args=args)
    thread.start()
    return thread


def test_no_directory_configured_not_there_yet_or_without_dump_files_is_no_data(tmp_path):
    with pytest.raises(NoData, match="^unconfigured:collector.nccl.dump-dir"):
        source("").read()
    with pytest.raises(NoData, match=f"^unavailable:{tmp_path / 'later'}"):
        source(tmp_path / "later").read()
    (tmp_path / "notes.txt").write_text("not a dump file\n")
    (tmp_path / "job").mkdir()
    with pytest.raises(NoData, match=f"^unavailable:{tmp_path}"):
        source(tmp_path).read()
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(SourceError, match="^unreadable:"):
        source(not_a_dir).read()


def test_options_reach_the_source(tmp_path):
    settings = resolve([f"--collector.nccl.dump-dir={tmp_path}", "--collector.nccl.max-bytes-per-read=512KiB",
                        "--collector.nccl.max-ranks=7", "--collector.nccl.stale-after=2m", "--analysis.window=30s"])[0]
    (spec,) = COLLECTOR.sources
    src = spec.factory(settings)
    assert (src.dump_dir, src.max_bytes, src.max_ranks, src.stale_after, src.history) == (
        str(tmp_path), 512 << 10, 7, 120.0, 30.0)
    assert settings[spec.interval_option] == 1.0
    for flag, key in (("--collector.nccl.max-bytes-per-read=1KiB", "max-bytes-per-read"),
                      ("--collector.nccl.max-bytes-per-read=4 parsecs", "max-bytes-per-read"),
                      ("--collector.nccl.max-ranks=0", "max-ranks")):
        with pytest.raises(ConfigError, match=f"collector.nccl.{key}"):
            resolve([flag])


def test_appended_rotated_truncated_and_deleted_while_reading(tmp_path):
    path = tmp_path / "hgx-a17-pid4242.log"
    src = source(tmp_path)
    writer = PluginWriter(path)
    key = ("collective", "0x7f8c496ae9f661", 0, 4242)
    counted = 0

    def phase(count):
        nonlocal counted
        readings = read_while(src, in_background(writer.write, count))
        assert all(r.data.malformed == 0 and r.data.skipped_bytes == 0 for r in readings)
        counted = totals(readings[-1])[key]
        return readings

    # appended: every record counted once, however the lines were cut
    readings = phase(400)
    assert counted == 400
    assert sum(r.data.ranks[0].collectives for r in readings if r.data.ranks) == 400
    assert readings[-1].data.ranks[0].last_seq == 399

    # rotated by rename: the writer's descriptor follows the file, and so does the source
    os.rename(path, tmp_path / "hgx-a17-pid4242.log.1")
    phase(300)
    assert counted == 700

    # truncated under the writer (copytruncate): the writer goes on at its offset, leaving a
    # hole of NUL bytes that the source reads through
    os.truncate(tmp_path / "hgx-a17-pid4242.log.1", 0)
    phase(200)
    assert counted == 900

    # a new process of the same name writes a new file: read from its start
    writer.close()
    os.unlink(tmp_path / "hgx-a17-pid4242.log.1")
    with pytest.raises(NoData):  # the file is gone, and with it its ranks
        src.read()
    writer = PluginWriter(path, seed=11)
    phase(150)
    assert counted == 150
    writer.close()


def test_directory_that_vanishes_and_comes_back(tmp_path):
    dump = tmp_path / "dump"
    src = source(dump)
    with pytest.raises(NoData):
        src.read()
    dump.mkdir()
    (dump / "a-pid1.log").write_text(lines(0, 5, pid=1))
    assert totals(src.read()) == {("collective", "0x7f8c496ae9f661", 0, 1): 5}
    for f in dump.iterdir():
        f.unlink()
    dump.rmdir()
    with pytest.raises(NoData):
        src.read()
    dump.mkdir()
    (dump / "a-pid1.log").write_text(lines(0, 3, pid=1))
    assert totals(src.read()) == {("collective", "0x7f8c496ae9f661", 0, 1): 3}


def test_subdirectories_per_job_are_read(tmp_path):
    (tmp_path / "4411872").mkdir()
    (tmp_path / "4411872" / "n1-pid7.log").write_text(lines(0, 4, pid=7))
    (tmp_path / "n1-pid8.log").write_text(lines(0, 2, pid=8))
    (tmp_path / "notes.txt").write_text("not a dump file\n")
    reading = source(tmp_path).read()
    assert reading.data.files == 2
    assert sorted(totals(reading).values()) == [2, 4]


def test_a_file_growing_faster_than_the_budget_is_skipped_ahead(tmp_path):
    path = tmp_path / "n-pid9.log"
    path.write_text("")
    src = source(tmp_path, max_bytes_per_read=64 * 1024)
    src.read()
    line = len(lines(0, 1, pid=9))
    with open(path, "a") as f:
        f.write(lines(0, 1000, pid=9))
    reading = src.read()
    data = reading.data
    assert data.bytes_read <= 64 * 1024
    assert data.skipped_bytes >= 1000 * line - 64 * 1024
    assert data.malformed == 0  # the line cut by the skip is skipped, not malformed
    read = data.ranks[0].collectives
    assert 64 * 1024 // line - 1 <= read <= 64 * 1024 // line
    assert data.ranks[0].last_seq == 999  # the newest records are the ones read
    assert src.read().data.skipped_bytes == 0


def test_history_is_not_counted(tmp_path):
    """A file found at start holds the job's past: the source begins at its last read's worth
    of bytes, without counting the rest as skipped, and records older than the window give
    the rank and its latest operation but no count."""
    clocks = Clocks()
    old = clocks.wall - 300
    text = "".join(inspector_line(seq, old, pid=5) for seq in range(2000))
    text += "".join(inspector_line(seq, clocks.wall, pid=5) for seq in range(2000, 2010))
    (tmp_path / "n-pid5.log").write_text(text)
    src = source(tmp_path, clocks, max_bytes_per_read=64 * 1024, history=60.0)
    reading = src.read()
    (rank,) = reading.data.ranks
    assert reading.data.skipped_bytes == 0
    assert rank.collectives == rank.collectives_total == 10
    assert rank.last_seq == 2009


def test_stale_ranks_and_stale_files(tmp_path):
    clocks = Clocks()
    (tmp_path / "n-pid5.log").write_text(lines(0, 3, pid=5))
    src = source(tmp_path, clocks, stale_after=900.0)
    assert len(src.read().data.ranks) == 1
    clocks.advance(899)
    assert len(src.read().data.ranks) == 1
    clocks.advance(2)
    assert src.read().data.ranks == ()
    # a file left by a job that ended long ago is not read, only what it may still get
    old = tmp_path / "old-pid6.log"
    old.write_text(lines(0, 50, pid=6))
    past = time.time() - 3600
    os.utime(old, (past, past))
    fresh = source(tmp_path, Clocks(), stale_after=900.0)
    assert {r.pid for r in fresh.read().data.ranks} == {5}
    with open(old, "a") as f:
        f.write(lines(50, 2, pid=6))
    assert {r.pid: r.collectives for r in fresh.read().data.ranks}[6] == 2


def test_rank_table_is_bounded(tmp_path):
    clocks = Clocks()
    src = source(tmp_path, clocks, max_ranks=3)
    path = tmp_path / "n-pid5.log"
    with open(path, "w") as f:
        for rank in range(3):
            f.write(lines(0, 1, pid=5, rank=rank))
    src.read()
    clocks.advance(1)
    with open(path, "a") as f:
        f.write(lines(1, 1, pid=5, rank=1) + lines(1, 1, pid=5, rank=2) + lines(0, 1, pid=5, rank=3))
    reading = src.read()
    assert sorted(r.rank for r in reading.data.ranks) == [1, 2, 3]  # rank 0 was the quietest
    assert reading.data.evicted_total == 1


def test_prometheus_files_rewritten_in_place(tmp_path):
    path = tmp_path / "nccl_inspector_metrics_2b1e8f4c-3d9a-4e6b-8c1d-5a7f9e2b6c3d.prom"
    path.write_text(text_fixture("nccl", "prom-2.30.prom"))
    src = source(tmp_path)
    first = src.read().data
    by_kind = {r.kind: r for r in first.ranks}
    coll = by_kind["collective"]
    assert coll.collectives is None and coll.collectives_total is None
    assert (coll.comm, coll.rank, coll.pid, coll.device, coll.hostname) == ("DP Group 0", -1, 0, 0, "nvl72004-T01")
    assert coll.device_uuid == "GPU-2b1e8f4c-3d9a-4e6b-8c1d-5a7f9e2b6c3d"
    assert coll.exec_seconds == pytest.approx((9498.47 + 98.7) * 1e-6)
    assert coll.bus_bytes == pytest.approx((678.263 * 9498.47 + 512.04 * 98.7) * 1e3)
    assert coll.last_unix == pytest.approx(path.stat().st_mtime)
    assert by_kind["p2p"].msg_bytes == 512 * 2 ** 20
    # unchanged: not read again, the same gauges
    again = src.read().data
    assert again.bytes_read == 0 and again.ranks == first.ranks
    # caught half rewritten (the plugin truncates and writes in place): the previous content
    # stands; the whole new content is read once it is there
    text = text_fixture("nccl", "prom-2.30.prom").replace("678.263", "301.5")
    path.write_text(text[:200])
    assert src.read().data.ranks == first.ranks
    path.write_text(text)
    ranks = {r.kind: r for r in src.read().data.ranks}
    assert ranks["collective"].bus_bytes == pytest.approx((301.5 * 9498.47 + 512.04 * 98.7) * 1e3)
    # the plugin removes its files when the job ends
    path.unlink()
    with pytest.raises(NoData):
        src.read()


def test_lines_that_are_not_records_are_counted_and_the_rest_read(tmp_path):
    (tmp_path / "n-pid77801.log").write_text(text_fixture("nccl", "json-mixed-versions.log"))
    reading = source(tmp_path, Clocks(wall=1764081203.0)).read()  # just after the fixture's records
    assert (reading.data.malformed, reading.data.unsupported) == (2, 1)
    assert reading.data.malformed_total == 2 and reading.data.unsupported_total == 1
    (rank,) = reading.data.ranks
    assert rank.collectives == 2 and rank.last_seq == 20


def test_files_found_at_start_share_the_budget_without_counting_their_history_as_skipped(tmp_path):
    for pid in (1, 2, 3):
        (tmp_path / f"n-pid{pid}.log").write_text(lines(0, 500, pid=pid))
    src = source(tmp_path, max_bytes_per_read=64 * 1024)
    first = src.read().data
    assert first.skipped_bytes == 0 and first.malformed == 0
    assert first.bytes_read <= 64 * 1024
    assert {r.pid: r.last_seq for r in first.ranks} == {1: 499, 2: 499, 3: 499}
    for pid in (1, 2, 3):
        with open(tmp_path / f"n-pid{pid}.log", "a") as f:
            f.write(lines(500, 200, pid=pid))
    later = src.read().data
    assert later.skipped_bytes > 0  # now they are behind, and it counts
    assert {r.pid: r.last_seq for r in later.ranks} == {1: 699, 2: 699, 3: 699}


def test_a_simulated_node_has_no_nccl_data_live_or_in_virtual_time():
    with pytest.raises(NoData, match="^unconfigured:collector.nccl.dump-dir"):
        SimulatedNode(SCENARIOS["straggler"], 0.0).reading("nccl", 1.0)
    sampler = run_virtual(SCENARIOS["straggler"], default_settings(), 3.0)
    state = sampler.states["nccl"]
    assert state.up and state.no_data and state.errors == 0 and state.latest is None
    assert sampler.states["cpu"].latest is not None
