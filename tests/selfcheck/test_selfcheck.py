"""``gpuwait selfcheck``: the schedule, the phase driver's options and sizing (without
PyTorch), the cgroup quota, the read-out of the exporter's metrics, the report and the exit
codes; and whole runs of the real exporter on the NVML double, with the PyTorch workloads
replaced by a stand-in driver (tests/support/selfcheck_standin.py) whose host side is real."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from gpuwait import tool
from gpuwait.core.facts import CAUSES
from gpuwait.selfcheck import cgroup, phases, readout, report, runner, workload
from gpuwait.selfcheck.children import Exporter, child_env
from nvml_support import DOUBLE_DIR
from support import REPO

EXPORTER_DIR = os.path.join(REPO, "exporter")
STANDIN = os.path.join(REPO, "tests", "support", "selfcheck_standin.py")


# -- the schedule ----------------------------------------------------------------------------
def test_the_default_run_fits_in_six_minutes():
    s = phases.schedule(phases.DEFAULT_WINDOW, phases.DEFAULT_PHASE_SECONDS, phases.PHASES)
    assert s.verdict_interval == 2.0
    assert s.settle == phases.DEFAULT_WINDOW + 2.0
    assert s.recorded == s.settle + phases.DEFAULT_PHASE_SECONDS
    assert s.estimate() == len(phases.PHASES) * (s.recorded + phases.SETUP_ESTIMATE)
    assert s.estimate() <= 330  # six minutes, less the probe and the replays


def test_the_verdict_interval_follows_the_window():
    assert [phases.verdict_interval(w) for w in (10, 19, 20, 60)] == [1.0, 1.0, 2.0, 6.0]


@pytest.mark.parametrize("window, seconds, message", [
    (5, 10, "at least 10 s"), (float("nan"), 10, "at least 10 s"), (20, 0, "positive"), (20, float("inf"), "positive")])
def test_a_schedule_that_cannot_work_is_refused(window, seconds, message):
    with pytest.raises(ValueError, match=message):
        phases.schedule(window, seconds, phases.PHASES)


def test_phases_run_in_their_order_and_unknown_names_are_refused():
    assert [p.name for p in phases.select(["idle_context", "compute"])] == ["compute", "idle_context"]
    assert phases.select(None) == phases.PHASES
    with pytest.raises(ValueError, match="unknown phase nope"):
        phases.select(["nope"])


def test_every_phase_expects_a_verdict_and_has_a_driver():
    assert [p.name for p in phases.PHASES] == list(workload.PHASES) == list(workload.RUNNERS)
    for p in phases.PHASES:
        assert p.expected in p.accepted and set(p.accepted) <= set(CAUSES), p
        assert set(p.evidence) <= set(readout.EVIDENCE), p


def test_each_phase_gets_its_driver_options_and_the_exporter_its_window(tmp_path):
    r = runner.Runner(runner.Options(out=str(tmp_path), window=30, phase_seconds=5))
    args = {p.name: r.workload_args(p, f"0{i}-{p.name}") for i, p in enumerate(phases.PHASES, 1)}
    assert args["few_workers"] == ["--workers", "1"]
    workers = int(args["cpu_quota"][1])
    assert args["cpu_quota"][0] == "--workers" and 2 <= workers <= runner.QUOTA_WORKERS
    assert args["random_reads"] == ["--data-file", str(tmp_path / f"05-random_reads.{os.getpid()}.data")]
    assert not any(args[n] for n in ("compute", "pageable_copy", "tiny_kernels", "idle_context"))
    assert r.exporter_args("t.gz") == ["--record.file=t.gz", "--analysis.window=30s", "--verdict.interval=3s"]
    assert r.workload_env["CUDA_VISIBLE_DEVICES"] == "0" and r.workload_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert r.workload_env["PYTHONPATH"].split(os.pathsep)[0] == EXPORTER_DIR


# -- the phase driver without PyTorch ------------------------------------------------------
def _driver(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[dict]]:
    done = subprocess.run([sys.executable, "-m", "gpuwait.selfcheck.workload", *args], capture_output=True, text=True,
                          env=child_env(env), timeout=60)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("args, message", [
    (("run", "random_reads", "--counters", "c.json"), "needs --data-file"),
    (("run", "random_reads", "--counters", "c.json", "--data-file", "d", "--record-bytes", "1000"), "multiple of 4096"),
    (("run", "random_reads", "--counters", "c.json", "--data-file", "d", "--file-bytes", "64KiB"), "at least 64 records"),
    (("run", "few_workers", "--counters", "c.json", "--step-share", "1.5"), "fraction between 0 and 1"),
    (("run", "few_workers", "--counters", "c.json", "--workers", "0"), "at least 1"),
    (("run", "pageable_copy", "--counters", "c.json", "--copy-bytes", "lots"), "not a size in bytes"),
    (("run", "tiny_kernels", "--counters", "c.json", "--width", "8192"), "not a tiny kernel"),
    (("run", "nope", "--counters", "c.json"), "invalid choice"),
    (("run", "compute"), "--counters"),
])
def test_driver_options_are_checked_before_pytorch_is_needed(args, message):
    code, events = _driver(*args)
    assert code == 2
    assert [e["event"] for e in events] == ["error"] and message in events[0]["error"], events


def _fake_torch(tmp_path: Path, body: str) -> dict[str, str]:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text(body)
    return {"PYTHONPATH": f"{tmp_path}{os.pathsep}{EXPORTER_DIR}"}


def test_without_pytorch_the_driver_says_how_to_install_it(tmp_path):
    env = _fake_torch(tmp_path, 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    code, events = _driver("probe", env=env)
    assert code == 2
    assert events == [{"event": "error", "error": f"PyTorch is not installed for {sys.executable}: pip install 'gpuwait[selfcheck]'"}]


def test_pytorch_without_cuda_is_a_setup_error(tmp_path):
    env = _fake_torch(tmp_path, "__version__ = '2.13.0+cpu'\n"
                                "class version:\n    cuda = None\n"
                                "class cuda:\n    is_available = staticmethod(lambda: False)\n")
    code, events = _driver("probe", env=env)
    assert code == 2
    assert events == [{"event": "error", "error": "PyTorch 2.13.0+cpu sees no CUDA GPU (it is built without CUDA)"}]


def test_the_gpu_uuid_is_written_as_nvml_writes_it():
    class Raw:
        def __init__(self, text="", data=None):
            self.text, self.bytes = text, data

        def __str__(self):
            return self.text

    want = "GPU-5e4a1c90-0001-4a8e-9c3f-00000000000a"
    assert workload.gpu_uuid("5E4A1C90-0001-4A8E-9C3F-00000000000A") == want
    assert workload.gpu_uuid(Raw(want)) == want
    assert workload.gpu_uuid(Raw("<_CUuuid object>", bytes.fromhex("5e4a1c9000014a8e9c3f00000000000a"))) == want
    assert workload.gpu_uuid("MIG-5e4a1c90-0001-4a8e-9c3f-00000000000a").startswith("MIG-5e4a1c90")
    assert workload.gpu_uuid(Raw("<_CUuuid object>")) is None and workload.gpu_uuid(None) is None


def test_sizing_follows_the_measured_costs():
    decode = workload.size_decode_pipeline(0.005, 0.2, 0.25)
    assert decode.batch == 40 and decode.step_seconds == pytest.approx(0.05)
    assert workload.size_decode_pipeline(0.5, 0.2, 0.25).batch == 1  # a sample dearer than a batch
    reads = workload.size_read_pipeline(1e-4, 1.0, 4, 0.25, 65536)
    assert reads.batch == 40000 and reads.step_seconds == pytest.approx(0.25)
    assert workload.size_read_pipeline(0.5, 1.0, 4, 0.25, 65536).batch == 64  # slow device: 16 records a reader
    assert workload.size_read_pipeline(1e-6, 1.0, 4, 0.25, 500).batch == 500  # never more than the buffer holds
    assert workload.matmul_count(0.05, 2e-4) == 250 and workload.matmul_count(1e-5, 2e-4) == 1
    assert workload.pause_after(0.002, 0.25) == pytest.approx(0.006)
    for bad in (lambda: workload.size_decode_pipeline(0.0, 0.2, 0.25), lambda: workload.matmul_count(0.05, 0.0),
                lambda: workload.size_read_pipeline(0.0, 0.1, 8, 0.25, 100)):
        with pytest.raises(workload.SetupError, match="cannot size"):
            bad()


def test_the_data_file_is_neither_compressible_nor_made_of_repeated_blocks():
    size = (16 << 20) + 3 * 4096 + 100
    chunks = [bytes(c) for c in workload.data_file_chunks(size, chunk=1 << 20)]
    data = b"".join(chunks)
    assert len(data) == size
    blocks = [data[i:i + 4096] for i in range(0, size, 4096)]
    assert len(set(blocks)) == len(blocks)
    assert len(zlib.compress(data[:1 << 20])) > 0.99 * (1 << 20)


def test_the_data_file_written_is_what_was_asked(tmp_path):
    path = tmp_path / "records.data"
    workload.write_data_file(str(path), 1 << 20)
    assert path.stat().st_size == 1 << 20
    import mmap
    import random

    reader = workload.RandomRecords(str(path), 4096, 256, workload.supports_direct(str(path), 4096), readers=3)
    buffer = mmap.mmap(-1, 7 * 4096)
    for future in reader.start(buffer, 7, seed=5):
        future.result()
    content = path.read_bytes()
    expected = b""
    for first in (0, 3, 6):  # three readers, ceil(7 / 3) = 3 records each
        rng = random.Random(5 * 1000 + first)
        for _ in range(first, min(7, first + 3)):
            offset = rng.randrange(256) * 4096
            expected += content[offset:offset + 4096]
    assert buffer[:] == expected


MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw
31 22 259:1 / /data\\040sets rw,noatime shared:9 - xfs /dev/nvme0n1 rw
32 31 0:40 / /data\\040sets/scratch rw - tmpfs tmpfs rw
33 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:6 - cgroup2 cgroup2 rw,nsdelegate
"""


def test_the_filesystem_of_a_path_is_its_longest_mount():
    assert workload.filesystem_of("/tmp/x/y", MOUNTINFO) == ("/tmp", "tmpfs")
    assert workload.filesystem_of("/data sets/train", MOUNTINFO) == ("/data sets", "xfs")
    assert workload.filesystem_of("/data sets/scratch/a", MOUNTINFO) == ("/data sets/scratch", "tmpfs")
    assert workload.filesystem_of("/home", MOUNTINFO) == ("/", "ext4")
    assert workload.filesystem_of("/tmpfoo", MOUNTINFO) == ("/", "ext4")
    with open("/proc/self/mountinfo") as f:
        point, fstype = workload.filesystem_of(os.getcwd(), f.read())
    assert os.getcwd().startswith(point) and fstype


def test_counters_are_cumulative_and_rewritten_whole(tmp_path):
    path = tmp_path / "c.json"
    counters = workload.Counters(str(path), every=3600)
    counters.add("batches", 1)
    counters.flush(force=True)
    counters.add("batches", 2)
    counters.add("data_wait_seconds", 0.5)
    counters.flush()  # within the interval: not rewritten
    assert json.loads(path.read_text())["counters"] == {"batches": 1}
    counters.flush(force=True)
    data = json.loads(path.read_text())
    assert data["counters"] == {"batches": 3, "data_wait_seconds": 0.5} and data["t"] <= time.monotonic()
    assert not (tmp_path / "c.json.tmp").exists()


# -- the cgroup quota ----------------------------------------------------------------------------
def test_the_cgroup2_mount_and_own_cgroup_are_found():
    assert cgroup.cgroup2_mount(MOUNTINFO) == "/sys/fs/cgroup"
    hybrid = "40 30 0:35 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n41 30 0:36 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    assert cgroup.cgroup2_mount(hybrid) == "/sys/fs/cgroup/unified"
    assert cgroup.cgroup2_mount("22 1 254:0 / / rw - ext4 /dev/vda rw\n") is None
    assert cgroup.own_cgroup("12:cpu:/\n0::/user.slice/session-1.scope\n") == "/user.slice/session-1.scope"
    assert cgroup.own_cgroup("0::/\n") == "/"
    assert cgroup.own_cgroup("4:memory:/x\n") is None


def _tree(root: Path, controllers: str, delegating: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    for path, enabled in delegating.items():
        d = root / path
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.subtree_control").write_text(enabled + "\n")


def test_a_hierarchy_without_the_cpu_controller_is_unavailable(tmp_path):
    _tree(tmp_path, "hugetlb", {".": ""})
    with pytest.raises(cgroup.Unavailable, match="has no cpu controller .cgroup.controllers: hugetlb"):
        cgroup.find_parent(str(tmp_path), "/")


def test_the_group_goes_where_cpu_is_delegated_nearest_first(tmp_path):
    _tree(tmp_path, "cpuset cpu io memory pids", {".": "cpu memory", "job.slice": "cpu", "job.slice/step.scope": "memory"})
    assert cgroup.find_parent(str(tmp_path), "/job.slice/step.scope") == str(tmp_path / "job.slice")
    _tree(tmp_path, "cpuset cpu io memory pids", {"job.slice": "memory"})
    assert cgroup.find_parent(str(tmp_path), "/job.slice/step.scope") == str(tmp_path)
    _tree(tmp_path, "cpuset cpu io memory pids", {".": "memory"})
    with pytest.raises(cgroup.Unavailable, match="does not delegate cpu"):
        cgroup.find_parent(str(tmp_path), "/job.slice/step.scope")


def test_a_quota_group_is_made_and_entered(tmp_path):
    mount = tmp_path / "cg"
    _tree(mount, "cpu memory", {".": "cpu"})
    (tmp_path / "mountinfo").write_text(f"33 22 0:27 / {mount} rw - cgroup2 cgroup2 rw\n")
    (tmp_path / "cgroup").write_text("0::/\n")
    group = cgroup.QuotaGroup.create(1.5, "check", str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"))
    assert group.path == str(mount / "check")
    assert (mount / "check" / "cpu.max").read_text() == "150000 100000\n"
    child = subprocess.Popen([sys.executable, "-c", "pass"], preexec_fn=group.enter)
    child.wait()
    assert (mount / "check" / "cgroup.procs").read_text() == f"{child.pid}\n"
    (mount / "check" / "cpu.stat").write_text("usage_usec 900\nnr_periods 40\nnr_throttled 30\nthrottled_usec 2500000\n")
    assert group.stat() == {"usage_usec": 900, "nr_periods": 40, "nr_throttled": 30, "throttled_usec": 2500000}


def test_a_quota_on_this_host_is_set_or_refused_with_its_reason():
    try:
        group = cgroup.QuotaGroup.create(0.5, f"gpuwait-selfcheck-test-{os.getpid()}")
    except cgroup.Unavailable as e:
        assert "cgroup" in str(e) or "cpu" in str(e), e
        return
    try:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"], preexec_fn=group.enter)
        assert Path(f"/proc/{child.pid}/cgroup").read_text().strip().endswith(os.path.basename(group.path))
        assert Path(group.path, "cpu.max").read_text().split() == ["50000", "100000"]
        child.wait()
    finally:
        group.remove()
    assert not os.path.exists(group.path)


# -- the read-out --------------------------------------------------------------------------------
def _scrape(t: float, verdict: str | None, idle: float, owner_cpu: float | None = None, disk: float | None = None) -> readout.Scrape:
    evidence = {"utilization": 1 - idle, "disk": None if disk is None else {"device": "nvme0n1", "queue_depth": disk}}
    return readout.Scrape(t, verdict, {"storage": idle, "none": 0.0}, evidence, owner_cpu, 1.0)


def test_the_settled_verdict_is_the_one_most_reads_named():
    scrapes = [_scrape(0, "storage", 0.6, disk=8), _scrape(1, "data_pipeline", 0.5, disk=4), _scrape(2, "storage", 0.7, disk=6),
               _scrape(3, None, 0.6)]
    settled = readout.settle(scrapes)
    assert settled.verdict == "storage" and settled.held == 0.5
    assert settled.verdicts == ["storage", "data_pipeline", "storage", None]
    assert settled.waits["storage"] == pytest.approx(0.6)
    assert settled.evidence["utilization"] == pytest.approx(0.4)
    assert settled.evidence["disk"] == {"device": "nvme0n1", "queue_depth": 6.0}
    tie = readout.settle([_scrape(0, "none", 0.1), _scrape(1, "storage", 0.6)])
    assert tie.verdict == "storage"  # the latest of those tied
    assert readout.settle([_scrape(0, None, 0.0)]).verdict is None


def test_a_slow_tier_counter_is_measured_between_its_changes():
    # Refreshed every 5 s at 0.5 core, read every second: 2.5 CPU-seconds per refresh.
    points = [(t, 2.5 * ((t + 3) // 5)) for t in range(0, 16)]
    assert readout.counter_rate(points) == pytest.approx(0.5)
    assert readout.counter_rate([(0, 7.0), (10, 7.0)]) == 0.0
    assert readout.counter_rate([(0, 1.0)]) is None
    earlier = [_scrape(t, None, 0.0, owner_cpu=2.5 * ((t + 3) // 5)) for t in range(0, 10)]
    settled = readout.settle([_scrape(t, "none", 0.0, owner_cpu=2.5 * ((t + 3) // 5)) for t in range(10, 16)], earlier)
    assert settled.evidence["owner_cores"] == pytest.approx(0.5)


def test_the_workload_measures_itself_over_the_settled_part():
    before = (100.0, {"data_wait_seconds": 2.0, "batches": 10, "copy_seconds": 1.0, "copied_bytes": 1e9})
    after = (110.0, {"data_wait_seconds": 9.5, "batches": 60, "copy_seconds": 3.0, "copied_bytes": 5e9, "kernels": 100})
    got = readout.measured(before, after, 50.0, 62.0)
    assert got == pytest.approx({"seconds": 10.0, "data_wait_share": 0.75, "batches_per_second": 5.0, "copy_share": 0.2,
                                 "copied_bytes_per_second": 4e8, "kernels_per_second": 10.0,
                                 "copy_bytes_per_second": 2e9, "cores": 1.2})
    assert readout.measured(None, after, None, None) == {}


def test_the_replayed_verdict_is_read_from_a_real_diagnosis():
    done = subprocess.run([sys.executable, "-m", "gpuwait.tool", "diagnose", "--simulate", "data_pipeline", "--json"],
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode in (1, 2), done.stderr
    diagnosis = json.loads(done.stdout)
    first = diagnosis["gpus"][0]
    got = readout.replayed(done.stdout, None, first["uuid"], 99)
    assert got.verdict == "data_pipeline" and got.error is None
    assert got.waits == first["waits"]
    assert any("saturated" in line for line in got.evidence), got.evidence
    assert readout.replayed(done.stdout, None, None, 0).verdict == "data_pipeline"  # by index without a UUID
    assert readout.replayed(done.stdout, None, "GPU-not-there", 0).error == "the GPU is not in the replayed trace's diagnosis"
    assert readout.replayed("not json", None, None, 0).error.startswith("not a diagnosis")


@pytest.mark.integration
def test_the_read_out_of_a_running_exporter(tmp_path):
    """A simulated data-pipeline node served live by the real exporter, read as the self-check
    reads its phases."""
    exporter = Exporter(["--simulate.scenario=data_pipeline", "--analysis.window=10s", "--verdict.interval=1s"],
                        str(tmp_path / "exporter.log"), child_env()).start()
    try:
        deadline = time.monotonic() + 30
        while True:
            metrics = exporter.scrape()
            key = readout.find_gpu(metrics, None, 2)
            scrape = readout.read(metrics, key, time.monotonic()) if key else None
            if scrape and scrape.verdict == "data_pipeline" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert key is not None and key.gpu == "2"
        assert readout.find_gpu(metrics, key.uuid.upper().removeprefix("GPU-"), 0) == key  # by UUID, whatever the index
        assert scrape.verdict == "data_pipeline", scrape
        assert scrape.evidence["saturated_cores"] >= 1 and 0.3 < scrape.evidence["idle"] < 0.7
        assert scrape.evidence["pcie"]["generation"] == 5 and scrape.owner_processes >= 1
        assert scrape.owner_cpu_seconds > 0
    finally:
        assert exporter.stop() == 0


# -- the report and the exit codes ----------------------------------------------------------------
def _result(name: str, status: str, verdict: str | None = None, **kw) -> report.PhaseResult:
    phase = phases.BY_NAME[name]
    return report.PhaseResult(name, phase.title, phase.expected, list(phase.accepted), status, verdict=verdict,
                              held=1.0 if verdict else None, evidence_keys=list(phase.evidence),
                              truth_keys=list(phase.truth), **kw)


def _report(*results: report.PhaseResult, error: str | None = None) -> report.Report:
    return report.Report("node-1", "2026-01-01T00:00:00Z", "0.1.0", {"index": 0, "device": "NVIDIA H200", "uuid": "GPU-1"},
                         {"window_seconds": 20.0, "phase_seconds": 12.0, "settle_seconds": 22.0, "out": "/tmp/x"},
                         list(results), error=error, seconds=301.0)


def test_exit_codes():
    agree = _result("compute", report.AGREE, "none")
    assert _report(agree, _result("cpu_quota", report.SKIPPED)).exit_code == 0
    assert _report(agree, _result("pageable_copy", report.DISAGREE, "data_pipeline")).exit_code == 1
    assert _report(agree, _result("random_reads", report.ERROR)).exit_code == 2
    assert _report(_result("pageable_copy", report.DISAGREE, "none"), _result("random_reads", report.ERROR)).exit_code == 2
    assert _report(error="PyTorch is not installed").exit_code == 2


def test_the_report_as_json_and_as_a_table():
    few = _result("few_workers", report.AGREE, "data_pipeline",
                  evidence={"idle": 0.74, "utilization": 0.25, "sm_active": 0.2, "saturated_cores": 1.0, "owner_cores": 1.08},
                  measured={"gpu_busy_share": 0.24, "data_wait_share": 0.71, "batches_per_second": 4.9, "cores": 1.1},
                  replayed_verdict="data_pipeline", replayed_evidence=["  1 cores saturated over the window"])
    copy = _result("pageable_copy", report.DISAGREE, "data_pipeline",
                   evidence={"idle": 0.8, "pcie": {"rx_bytes_per_second": 2.1e10, "tx_bytes_per_second": 1e8,
                                                   "generation": 5.0, "width": 16.0}},
                   measured={"copy_share": 0.83, "copy_bytes_per_second": 2.2e10})
    quota = _result("cpu_quota", report.SKIPPED, reason="skipped: no CPU quota can be set here: read-only")
    r = _report(few, copy, quota)
    data = json.loads(r.to_json())
    assert data["format"] == "gpuwait-selfcheck" and data["version"] == 1 and data["exit_code"] == 1
    assert [p["status"] for p in data["phases"]] == ["agree", "disagree", "skipped"]
    assert "evidence_keys" not in data["phases"][0] and data["phases"][1]["evidence"]["pcie"]["generation"] == 5.0
    text = report.render_text(r)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("phase "))
    assert lines[header].split()[:6] == ["phase", "expected", "verdict", "(held)", "replayed", "result"]
    assert lines[header + 1].split()[:5] == ["few_workers", "data_pipeline", "data_pipeline", "(100%)", "data_pipeline"]
    assert "idle 74%, util 25%, SM active 20%, 1.0 cores saturated, owner 1.08 cores" in lines[header + 1]
    assert "PCIe rx 21.0 GB/s tx 0.1 GB/s on Gen5 x16" in lines[header + 2] and " disagree " in lines[header + 2]
    assert "measured by the workload: GPU kernels busy 24% (CUDA events); the loop waited for its next batch 71%;" \
           " 4.9 batches/s; process tree 1.10 cores" in text
    assert "pageable copies took 83% of the time; copies at 22.0 GB/s" in text
    assert "skipped: no CPU quota can be set here: read-only" in text
    assert lines[-1].startswith("result: a phase disagrees: attach the output folder to a bug report (exit code 1)")


@pytest.mark.parametrize("argv, message", [
    (["selfcheck", "--window", "abc"], "invalid float value"),
    (["selfcheck", "--phase", "nope"], "invalid choice"),
    (["selfcheck", "--bogus"], "unrecognized arguments: --bogus"),
    (["selfcheck", "--window", "5"], "--window must be at least 10 s"),
    (["selfcheck", "--workload-command", " "], "--workload-command is empty"),
])
def test_usage_errors_exit_2(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        sys.exit(tool.main([*argv, "--out", str(tmp_path)]))
    assert e.value.code == report.SETUP_ERROR
    assert message in capsys.readouterr().err


def test_diagnose_keeps_its_own_usage_exit_code(capsys):
    with pytest.raises(SystemExit) as e:
        tool.main(["diagnose", "--trace", "x", "--bogus"])
    assert e.value.code == 3


# -- whole runs on the NVML double ---------------------------------------------------------------
def selfcheck(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
              driver: str | None = f"{sys.executable} {STANDIN}") -> tuple[subprocess.CompletedProcess, dict]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([EXPORTER_DIR, DOUBLE_DIR]),
                   "GPUWAIT_NVML_DOUBLE": str(tmp_path / "machine.yaml"), **(env or {})}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "gpuwait.tool", "selfcheck", "--out", str(out), "--window", "10", "--phase-seconds", "3",
           *(("--workload-command", driver) if driver else ()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=environment, timeout=600)
    path = out / "report.json"
    return done, json.loads(path.read_text()) if path.exists() else {}


def _trace_header(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.loads(f.readline())


@pytest.mark.integration
def test_a_run_whose_phases_agree_exits_0(tmp_path):
    done, data = selfcheck(tmp_path, "--phase", "compute", "--phase", "random_reads", "--phase", "idle_context", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == data
    assert data["exit_code"] == 0 and data["error"] is None
    assert data["gpu"]["uuid"] == "GPU-5e1fc4ec-0000-4c2b-9d3f-000000000000" and data["gpu"]["exporter_index"] == "0"
    by_name = {p["name"]: p for p in data["phases"]}
    assert list(by_name) == ["compute", "random_reads", "idle_context"]
    assert by_name["random_reads"]["status"] == "skipped" and by_name["random_reads"]["reason"] == "skipped: the stand-in reads no storage"
    for name in ("compute", "idle_context"):
        p = by_name[name]
        assert p["status"] == "agree" and p["verdict"] == "none" and p["held"] >= 0.5, p
        assert len(p["verdicts"]) >= 3 and p["replayed_verdict"] == "none", p
        assert _trace_header(p["files"]["trace"])["format"] == "gpuwait-trace"
        assert _trace_header(p["files"]["trace"])["meta"]["analysis_window"] == 10.0
        assert json.loads(Path(p["files"]["diagnosis"]).read_text())["gpus"]
        assert "listening on 127.0.0.1" in Path(p["files"]["exporter_log"]).read_text()
        assert p["measured"]["seconds"] >= 2.5 and p["evidence"]["gpu_processes"] == 1
    assert by_name["compute"]["evidence"]["utilization"] > 0.9 and by_name["compute"]["measured"]["gpu_busy_share"] > 0.9
    assert by_name["idle_context"]["evidence"]["demand"] == 0 and by_name["idle_context"]["evidence"]["idle"] > 0.9
    assert by_name["idle_context"]["evidence"]["owner_cores"] < 0.05


@pytest.mark.integration
def test_a_run_with_a_disagreeing_phase_exits_1(tmp_path):
    """The stand-in's GPU shows a copy's idle time but the double moves no PCIe bytes while
    idle, so the exporter has no transfer to see and names something else."""
    done, data = selfcheck(tmp_path, "--phase", "tiny_kernels", "--phase", "pageable_copy")
    assert done.returncode == 1, done.stderr + done.stdout
    copy, tiny = data["phases"]  # in the self-check's order
    assert tiny["status"] == "agree" and tiny["verdict"] == "insufficient_work", tiny
    assert 0.1 < tiny["measured"]["cores"] < 0.5 and tiny["evidence"]["demand"] == 1
    assert copy["status"] == "disagree" and copy["verdict"] not in (None, "host_transfer"), copy
    table = done.stdout.splitlines()
    assert any(line.split()[:2] == ["tiny_kernels", "insufficient_work"] and " agree " in line for line in table)
    assert any(line.split()[:2] == ["pageable_copy", "host_transfer"] and " disagree " in line for line in table)
    assert table[-1].startswith("result: a phase disagrees")


@pytest.mark.integration
def test_without_pytorch_the_run_stops_at_once_with_exit_2(tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    done, data = selfcheck(tmp_path, driver=None, env={"PYTHONPATH": os.pathsep.join([str(shadow), EXPORTER_DIR])})
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"gpuwait selfcheck: PyTorch is not installed for {sys.executable}: pip install 'gpuwait[selfcheck]'"
    assert data["phases"] == [] and data["exit_code"] == 2


@pytest.mark.integration
def test_an_exporter_that_fails_ends_the_run_with_exit_2(tmp_path):
    done, data = selfcheck(tmp_path, "--phase", "compute", "--phase", "idle_context", "--exporter-arg=--no-such-flag")
    assert done.returncode == 2
    first, second = data["phases"]
    assert first["status"] == "error" and first["reason"].startswith("the exporter exited with code 2 at start")
    assert "--no-such-flag" in first["reason"]
    assert second == {**second, "status": "error", "reason": "not run: the exporter failed in an earlier phase"}


@pytest.mark.integration
def test_an_exporter_without_nvml_is_a_setup_error(tmp_path):
    done, data = selfcheck(tmp_path, "--phase", "idle_context", env={"SELFCHECK_STANDIN_DRIVER": "absent"})
    assert done.returncode == 2
    assert data["phases"][0]["reason"].startswith("the exporter cannot talk to the NVIDIA driver (gpuwait_gpu_backend_up 0)")


@pytest.mark.integration
def test_a_phase_that_cannot_be_set_up_does_not_stop_the_others(tmp_path):
    done, data = selfcheck(tmp_path, "--phase", "compute", "--phase", "idle_context", env={"SELFCHECK_STANDIN_FAIL": "compute"})
    assert done.returncode == 2, done.stderr
    compute, idle = data["phases"]
    assert compute["status"] == "error"
    assert compute["reason"] == "the workload could not be set up: stand-in: compute cannot be set up here"
    assert idle["status"] == "agree"
    assert "the check could not be completed (exit code 2)" in io.StringIO(done.stdout).read()
