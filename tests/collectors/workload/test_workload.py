"""The workload client (gpuwait.workload) and the workload collector that reads its records:
accounting, never blocking the loop, many processes, stale records, parsing and statistics."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import text_fixture
from gpuwait import client
from gpuwait.core.registry import resolve
from gpuwait.core.errors import ParseError
from gpuwait.core.registry import registry
from gpuwait.collectors.workload.parse import parse_record
from gpuwait.core.ring import WindowView
from gpuwait.core.source import HostPaths
from gpuwait.collectors.workload.payload import OwnedRecord, WorkloadData
from gpuwait.collectors.workload.source import WorkloadSource
from gpuwait.collectors.workload import window as wstats


def settings(*args):
    registry()
    return resolve(list(args))[0]


# -- parser ---------------------------------------------------------------------------------


def test_parses_training_and_inference_records():
    r = parse_record(text_fixture("workload", "training.txt"))
    assert (r.pid, r.starttime, r.kind, r.rank, r.job) == (31337, 8841223, "training", 3, "llama-70b-pretrain")
    assert (r.data_seconds, r.compute_seconds, r.comm_seconds) == (412.503211, 1210.880042, 98.114002)
    assert (r.steps, r.samples, r.requests) == (5120, 163840, 0)
    i = parse_record(text_fixture("workload", "inference.txt"))
    assert (i.kind, i.rank, i.job, i.requests, i.instance) == ("inference", -1, "", 42, 1)


def test_unknown_keys_of_a_newer_client_are_ignored():
    assert parse_record(text_fixture("workload", "newer-client.txt")).samples == 96


@pytest.mark.parametrize("name", ["truncated.txt", "future-version.txt"])
def test_incomplete_or_foreign_records_are_parse_errors(name):
    with pytest.raises(ParseError):
        parse_record(text_fixture("workload", name))


def test_the_client_writes_what_the_parser_reads(tmp_path):
    w = client.Workload(spool=str(tmp_path), start=False, rank=2, job="my job")
    w.mark(client.DATA)
    w.mark(client.COMPUTE)
    w.step(16)
    w.request(3)
    assert w.flush()
    r = parse_record((tmp_path / os.path.basename(w.path)).read_text())
    assert (r.pid, r.rank, r.job, r.steps, r.samples, r.requests) == (os.getpid(), 2, "my_job", 1, 16, 3)
    assert r.starttime == client._self_starttime() > 0
    w.close()
    assert not os.path.exists(w.path)


_lines = st.lists(st.sampled_from(text_fixture("workload", "training.txt").splitlines() + ["kind inference", "pid -1", "steps x", "at nan", "job"]), max_size=20)


@given(st.one_of(st.text(max_size=300), _lines.map(lambda ls: "\n".join(ls))))
def test_fuzz_only_parse_errors_escape(text):
    try:
        parse_record(text)
    except ParseError:
        pass


# -- client accounting --------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_batches_time_data_wait_and_compute_separately(tmp_path):
    clock = FakeClock()

    def slow_loader():
        for i in range(5):
            clock.now += 0.020  # the next batch takes 20 ms to arrive
            yield [i] * 8

    w = client.Workload(spool=str(tmp_path), start=False)
    w.clock = clock
    for batch in w.batches(slow_loader(), batch_size=len):
        clock.now += 0.010  # 10 ms of compute
        with w.comm():
            clock.now += 0.005
        clock.now += 0.001
    clock.now += 5.0  # after the loop: evaluation, not counted
    w.mark(client.OUTSIDE)
    data, compute, comm = w.seconds[:3]
    assert data == pytest.approx(0.100)
    assert compute == pytest.approx(0.055)
    assert comm == pytest.approx(0.025)
    assert (w.steps, w.samples) == (5, 40)


def test_a_loader_stuck_right_now_shows_as_data_wait(tmp_path):
    w = client.Workload(spool=str(tmp_path), start=False)
    w.mark(client.DATA)
    time.sleep(0.05)
    assert w.fields()["data_seconds"] >= 0.05
    first = w.fields()["data_seconds"]
    w.mark(client.COMPUTE)
    assert w.fields()["data_seconds"] >= first  # published counters never go backwards


def test_torch_loader_counts_samples_from_the_batch_shape(tmp_path):
    class Tensor:
        def __init__(self, n):
            self.shape = (n, 3, 224, 224)

    w = client.Workload(spool=str(tmp_path), start=False)
    batches = [(Tensor(32), Tensor(32)), {"x": Tensor(16)}, Tensor(8)]
    assert len(list(client.torch_loader(batches, w))) == 3
    assert (w.steps, w.samples) == (3, 56)


def _slow_batches():
    """64 items of 2 ms each in batches of 16: a torch DataLoader with two worker processes
    when PyTorch is installed (it is not a test dependency: its wheel is too large for CI),
    else the same batches from a plain iterator of array-like objects."""
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError:
        class Batch(list):
            @property
            def shape(self):
                return (len(self),)

        def plain():
            for start in range(0, 64, 16):
                time.sleep(16 * 0.002 / 2)
                yield Batch(float(i) for i in range(start, start + 16))

        return plain(), lambda batch: sum(batch)

    class Slow(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.full((4,), float(i))

    return DataLoader(Slow(), batch_size=16, num_workers=2), lambda batch: float(batch[:, 0].sum())


def test_torch_loader_on_a_dataloader(tmp_path):
    loader, total_of = _slow_batches()
    w = client.Workload(spool=str(tmp_path), start=False)
    total = 0.0
    for batch in client.torch_loader(loader, w):
        total += total_of(batch)
    assert (w.steps, w.samples) == (4, 64)
    assert total == pytest.approx(sum(range(64)))
    assert w.seconds[client.DATA] > 0.02  # 16 items of 2 ms per batch, two workers


# -- never blocking, never raising ------------------------------------------------------------


def test_a_missing_spool_is_created_world_writable_and_sticky(tmp_path):
    spool = tmp_path / "run" / "gpuwait" / "workload"
    w = client.Workload(spool=str(spool), start=False)
    assert w.flush()
    assert (spool.stat().st_mode & 0o7777) == 0o1777
    w.close()


def test_an_impossible_spool_fails_quietly_and_is_counted(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = client.Workload(spool=str(blocker / "spool"), start=False)
    w.mark(client.DATA)
    assert not w.flush()
    assert w.write_errors == {"ENOTDIR": 1}
    w.mark(client.COMPUTE)


def test_a_full_spool_fails_quietly_and_leaves_no_partial_file(tmp_path, monkeypatch):
    w = client.Workload(spool=str(tmp_path), start=False)
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(client.os, "write", full)
    assert not w.flush()
    assert w.write_errors == {"ENOSPC": 1}
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(client.os, "write", real_write)
    assert w.flush()  # space freed: the next write goes through


def test_a_hung_spool_does_not_slow_the_loop(tmp_path, monkeypatch):
    released = threading.Event()
    real_replace = os.replace

    def hung(src, dst):
        released.wait(5)
        return real_replace(src, dst)

    monkeypatch.setattr(client.os, "replace", hung)
    w = client.Workload(spool=str(tmp_path), flush_interval=0.01)
    try:
        time.sleep(0.05)  # the flushing thread is now stuck in the file system
        start = time.perf_counter()
        for _ in range(10000):
            w.mark(client.DATA)
            w.mark(client.COMPUTE)
        elapsed = time.perf_counter() - start
        assert elapsed < 0.5, f"20000 marks took {elapsed:.3f}s while the spool hung"
    finally:
        released.set()
        w.close()


# -- many processes, exits, stale records -------------------------------------------------------

RANK = textwrap.dedent("""
    import os, sys, time
    from gpuwait.client import Workload
    w = Workload(spool=sys.argv[1], flush_interval=0.05)
    for batch in w.batches(range(int(sys.argv[2])), batch_size=4):
        time.sleep(0.01)
    sys.stdout.write("done\\n"); sys.stdout.flush()
    if sys.argv[3] == "hang":
        time.sleep(60)
    elif sys.argv[3] == "crash":
        w.flush(); os._exit(1)
""")


def _ranks(spool, specs):
    return [subprocess.Popen([sys.executable, "-c", RANK, str(spool), str(steps), mode], stdout=subprocess.PIPE,
                             env=dict(os.environ, RANK=str(i)), text=True) for i, (steps, mode) in enumerate(specs)]


def test_many_ranks_publish_and_records_go_with_their_processes(tmp_path):
    spool = tmp_path / "spool"
    procs = _ranks(spool, [(20, "hang")] * 6 + [(5, "exit"), (5, "crash")])
    try:
        for p in procs:
            assert p.stdout.readline() == "done\n"
        procs[6].wait(10)
        procs[7].wait(10)
        source = WorkloadSource(HostPaths(), str(spool), stale_after=30.0)
        deadline = time.monotonic() + 10
        while True:
            reading = source.read()
            if len(reading.data.records) == 6 and all(r.record.steps == 20 for r in reading.data.records):
                break
            assert time.monotonic() < deadline, reading
            time.sleep(0.05)
        assert sorted(r.record.rank for r in reading.data.records) == [0, 1, 2, 3, 4, 5]
        assert all(r.owner for r in reading.data.records)  # attributed through /proc/<pid>/cgroup
        assert reading.errors == ()
        # The rank that exited cleanly removed its record; the crashed one's was removed by the source.
        assert sorted(p.name for p in spool.iterdir()) == sorted(f"{p.pid}-0.rec" for p in procs[:6])
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_records_not_rewritten_are_dropped(tmp_path):
    w = client.Workload(spool=str(tmp_path), start=False)
    assert w.flush()
    now = [time.monotonic()]
    source = WorkloadSource(HostPaths(), str(tmp_path), stale_after=30.0, clock=lambda: now[0])
    assert len(source.read().data.records) == 1
    now[0] += 31.0
    assert source.read().data.records == ()
    w.close()


def test_a_missing_spool_is_no_error_and_garbage_is_counted(tmp_path):
    assert WorkloadSource(HostPaths(), str(tmp_path / "absent")).read().data == WorkloadData()
    (tmp_path / "junk.rec").write_text("hello\n")
    (tmp_path / "big.rec").write_bytes(b"x" * 10000)
    reading = WorkloadSource(HostPaths(), str(tmp_path)).read()
    assert reading.data.records == ()
    assert reading.errors == (f"parse:{tmp_path}/<record>",)


# -- statistics -------------------------------------------------------------------------------


def _record(pid, t, data, compute, steps, kind="training", requests=0):
    text = client.format_record({"pid": pid, "starttime": 1, "instance": 0, "kind": kind, "rank": 0, "job": "-", "at": t,
                                 "interval": 1.0, "data_seconds": data, "compute_seconds": compute, "comm_seconds": 0.0,
                                 "steps": steps, "samples": steps * 8, "requests": requests})
    return OwnedRecord(parse_record(text), "slurm:42")


def _view(rows):
    times, columns = [], {}
    for i, (t, records) in enumerate(rows):
        times.append(t)
        for key, v in wstats.columns(WorkloadData(tuple(records))).items():
            columns.setdefault(key, [float("nan")] * len(rows))[i] = v
    return WindowView(times, columns)


def test_owner_ratios_step_time_and_throughput():
    # Two ranks over 60 s: rank 1 waits 30% of its loop time, rank 2 10%; 2 steps/s each.
    rows = [(t, [_record(1, t, 0.3 * t, 0.7 * t, 2 * t), _record(2, t, 0.1 * t, 0.9 * t, 2 * t)]) for t in range(0, 61, 5)]
    w = wstats.summarize(_view(rows), settings()).owners["slurm:42"]
    assert w.data_wait_ratio == pytest.approx(0.2)
    assert w.compute_ratio == pytest.approx(0.8)
    assert w.step_seconds == pytest.approx(0.5)
    assert w.steps_per_second == pytest.approx(4.0)
    assert w.samples_per_second == pytest.approx(32.0)
    assert w.throughput_drop_ratio == pytest.approx(0.0)
    assert w.processes == 2 and w.demand
    assert w.loop_ratio == pytest.approx(1.0)  # both ranks are in their loops all the time


def test_an_inference_servers_loop_time_excludes_its_wait_for_requests():
    # Serving 0.4 s of every second (its wait for the next request is outside its loop).
    rows = [(t, [_record(1, t, 0.0, 0.4 * t, 3 * t, kind="inference", requests=3 * t)]) for t in range(0, 61, 5)]
    w = wstats.summarize(_view(rows), settings()).owners["slurm:42"]
    assert w.loop_ratio == pytest.approx(0.4)


def test_a_restarted_rank_resets_only_itself_and_a_slowdown_is_a_drop():
    rows = []
    for t in range(0, 61, 5):
        # rank 1 halves its pace in the last 15 s; rank 2 restarts (new pid) at t=30
        steps1 = 2 * t if t <= 45 else 90 + (t - 45)
        records = [_record(1, t, 0.0, t, steps1)]
        records.append(_record(2, t, 0.0, t, 2 * t) if t < 30 else _record(3, t, 0.0, t - 30, 2 * (t - 30)))
        rows.append((t, records))
    w = wstats.summarize(_view(rows), settings()).owners["slurm:42"]
    # 4 steps/s before, 3 after: a quarter less, less the 5 s the restart cost rank 2
    assert 0.15 <= w.throughput_drop_ratio <= 0.25
    assert w.processes == 3


def test_inference_demand_follows_requests():
    rows = [(t, [_record(1, t, 0.0, 0.1 * t, t // 10, kind="inference", requests=t // 10)]) for t in range(0, 61, 5)]
    w = wstats.summarize(_view(rows), settings()).owners["slurm:42"]
    assert w.kind == "inference"
    assert w.requests_per_second == pytest.approx(0.1, abs=0.02)


def test_a_record_written_inside_a_pid_namespace_finds_its_host_process(tmp_path):
    # The container's main process is pid 1 to itself and 5000 on the host; the host's own
    # pid 1 (init) started at another time.
    proc, spool = tmp_path / "proc", tmp_path / "spool"
    stat = "{pid} (python3) S 1 1 1 0 -1 4194304 0 0 0 0 10 5 0 0 20 0 3 0 {start} 1000 100 0\n"
    for pid, start, nspid in ((1, 2, "1"), (5000, 987654, "5000\t1"), (5001, 987654, "5001\t2")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(stat.format(pid=pid, start=start))
        (proc / str(pid) / "status").write_text(f"Name:\tpython3\nPid:\t{pid}\nNSpid:\t{nspid}\n")
        (proc / str(pid) / "cgroup").write_text("0::/system.slice/train.service\n" if pid == 5000 else "0::/init.scope\n")
    spool.mkdir()
    text = client.format_record({"pid": 1, "starttime": 987654, "instance": 0, "kind": "training", "rank": 0, "job": "-",
                                 "at": time.monotonic(), "interval": 1.0, "data_seconds": 1.0, "compute_seconds": 1.0,
                                 "comm_seconds": 0.0, "steps": 1, "samples": 1, "requests": 0})
    (spool / "1-0.rec").write_text(text)
    source = WorkloadSource(HostPaths(procfs=str(proc)), str(spool))
    (owned,) = source.read().data.records
    assert owned.owner == "systemd:/system.slice/train.service"
    assert source._host_pids == {(1, 987654): 5000}


def test_the_client_imports_only_the_standard_library():
    probe = ("import sys, gpuwait.workload; "
             "print(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
             "('prometheus_client', 'yaml', 'psutil', 'pynvml', 'torch', 'bcrypt', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
