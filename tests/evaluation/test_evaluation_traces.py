"""The evaluation set's node model and trace recorder: deterministic given a seed, writing
traces that the repository's own trace reader reads, with the physics the truths rest on."""

import gzip
import json

import pytest

from evaluation.exporter import VERSION_1, _registry, installed_format
from evaluation.generate import generate
from evaluation.scenarios import select
from gpuwait.cli import payload_types
from gpuwait.trace.file import VERSION, TraceReader


def lines(path):
    with gzip.open(path, "rt") as f:
        return f.read().splitlines()


def read_back(path):
    reader = TraceReader(str(path), payload_types(list(_registry())))
    try:
        return reader.header, list(reader)
    finally:
        reader.close()


def test_the_same_seed_gives_the_same_trace_and_truth(short_runs, tmp_path, trace_format):
    out, truth = short_runs("single_thread_decode")
    again = generate(select("single_thread_decode")[0], str(tmp_path), 1, trace_format, duration=8.0)
    assert lines(out / "single_thread_decode.jsonl.gz") == lines(tmp_path / "single_thread_decode.jsonl.gz")
    assert json.dumps(truth, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_another_seed_gives_another_trace(short_runs):
    one, _ = short_runs("single_thread_decode")
    two, _ = short_runs("single_thread_decode", seed=2)
    a, b = lines(one / "single_thread_decode.jsonl.gz"), lines(two / "single_thread_decode.jsonl.gz")
    assert len(a) > 100 and a[1:] != b[1:]


def test_an_onset_run_is_deterministic_too(short_runs, tmp_path, trace_format):
    out, _ = short_runs("onset_cpu_limit_lowered", onset=4.0)
    generate(select("onset_cpu_limit_lowered")[0], str(tmp_path), 1, trace_format, duration=8.0, onset=4.0)
    assert lines(out / "onset_cpu_limit_lowered.jsonl.gz") == lines(tmp_path / "onset_cpu_limit_lowered.jsonl.gz")


# one scenario per kind of source the recorder writes: NFS, InfiniBand and RoCE ports, the
# workload records, NCCL Inspector records and the owner cgroups (where the reader has them)
READ_BACK = ["storage_nfs_bandwidth", "nccl_roce_congested_h100", "inspector_network_a100",
             "inference_bs1_high_rate", "quota_pod_sweep_a100", "onset_collective_hang"]


@pytest.mark.parametrize("name", READ_BACK)
def test_the_repository_reader_reads_every_line(short_runs, name, trace_format):
    out, truth = short_runs(name)
    header, readings = read_back(out / f"{name}.jsonl.gz")
    assert header.version == VERSION == trace_format.version
    assert len(readings) == len(lines(out / f"{name}.jsonl.gz")) - 1
    seen = {r.source for r in readings}
    assert seen == set(truth["sources"])
    assert seen <= trace_format.sources
    last = {}
    for r in readings:
        assert r.t >= last.get(r.source, 0.0)
        last[r.source] = r.t
    # the fast sources every 100 ms for the whole run
    cpu = [r.t for r in readings if r.source == "cpu"]
    assert len(cpu) == pytest.approx(80, abs=2)


def test_a_version_1_trace_holds_only_version_1_sources(tmp_path):
    truth = generate(select("inspector_network_a100")[0], str(tmp_path), 1, VERSION_1, duration=6.0)
    header, readings = read_back(tmp_path / "inspector_network_a100.jsonl.gz")
    assert header.version == 1
    assert {r.source for r in readings} <= VERSION_1.sources == set(VERSION_1.sources)
    assert set(truth["sources"]) == {r.source for r in readings}


def test_roce_traffic_is_on_the_rdma_port_and_not_on_its_netdev(short_runs):
    out, _ = short_runs("nccl_roce_congested_h100")
    _, readings = read_back(out / "nccl_roce_congested_h100.jsonl.gz")
    ports = [r.data for r in readings if r.source == "rdma_traffic"]
    netdev = [r.data for r in readings if r.source == "netdev"]
    details = next(r.data for r in readings if r.source == "rdma")
    port = details.devices[0].ports[0]
    assert port.link_layer == "Ethernet" and port.netdev in netdev[0].interfaces
    moved = ports[-1].ports[0].transmit_bytes - ports[0].ports[0].transmit_bytes
    counted = netdev[-1].interfaces[port.netdev].transmit_bytes - netdev[0].interfaces[port.netdev].transmit_bytes
    assert moved > 1e9 and counted == 0


def test_a_cpu_quota_caps_each_period_and_throttles():
    scenario = select("quota_pod_sweep_a100")[0]
    node = scenario.build(1).node
    pod = next(o for o in node.owners if o.gpu_processes)
    def busy():
        return [node.cpu.modes["user"][c] + node.cpu.modes["system"][c] for c in range(node.cpu.n)]
    while node.t < 1.0:
        node.step()
    start, stall = busy(), pod.cgroup.stall[("cpu", "some")]
    while node.t < 3.0:
        node.step()
    group = pod.cgroup
    # at most quota x period in any period (sched-bwc.rst), and throttled in most of them
    assert group.max_period_usage <= group.quota_cores * group.period + 1e-6
    assert group.nr_periods >= 25 and group.nr_throttled >= 0.8 * group.nr_periods
    # the throttled workers stay runnable, which is CPU pressure, while no core is saturated
    shares = [(b - a) / 2.0 for a, b in zip(start, busy())]
    assert max(shares) < 0.6
    assert (group.stall[("cpu", "some")] - stall) / 2.0 > 0.3


def test_an_idle_sample_reads_zero_and_a_spinning_collective_reads_busy(short_runs):
    out, _ = short_runs("stalled_collective_h100")
    _, readings = read_back(out / "stalled_collective_h100.jsonl.gz")
    fast = [r.data for r in readings if r.source == "gpu"]
    # the hung all-reduce keeps NCCL's kernel resident: utilization 100 %, GPM at its footprint
    late = fast[-1].gpus[0]
    assert late.utilization == 1.0
    assert late.gpm["sm_active"] == pytest.approx(20 / 132, abs=0.01)


def test_the_format_follows_the_installed_reader():
    fmt = installed_format()
    assert fmt.version == VERSION
    assert VERSION_1.sources <= fmt.sources
    assert fmt.key.startswith(f"v{VERSION}")
