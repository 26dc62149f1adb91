"""NCCL's own timing as verdict evidence, each rule on both sides of its line: the wait for a
late rank (the spread of execution times across a communicator's ranks) against collectives
long only because their message is large; a network that delivers under its links' speed
against a full-speed transfer, a late rank on another node, small messages and NVLink; the
straggler named from the timing rather than the host's inference."""

import pytest

from gpuwait.analysis.activity import GpuActivity
from gpuwait.analysis.attribution import DIRECT, Attribution
from gpuwait.analysis.collectives import GpuCollectives, join_ranks_to_gpus
from gpuwait.collectors.nccl.window import since
from gpuwait.analysis.evidence import collectives as timing
from gpuwait.analysis.verdict import GpuVerdict, _mark_stragglers
from gpuwait.collectors.gpu.payload import GpuDevice, GpuDeviceData
from gpuwait.collectors.rdma.payload import RdmaData, RdmaDeviceData, RdmaPortData
from gpuwait.core.facts import CAUSES
from gpuwait.core.registry import registry, resolve
from gpuwait.nvml.values import GpuProcess
from nccl_readings import rank, reading_at, view_of

STEP_OPS = 2  # collectives a second


def node(n=4, nics=None) -> GpuDeviceData:
    return GpuDeviceData(True, "", "570.124.06", "12.8", tuple(
        GpuDevice(i, f"GPU-{i}", True, processes=(GpuProcess(1000 + i, 1e9),), nics=(nics or {}).get(i, {}))
        for i in range(n)))


def job(per_op: dict[int, float], bus_rate=20e9, n_nodes=1, seconds=10, start=100.0, late_from=None, late=None):
    """One communicator whose rank on GPU i spends ``per_op[i]`` seconds in each of its
    collectives, every rank moving the same bytes at ``bus_rate`` while it transfers (the
    shortest time is all transfer), read every second from ``start``; from second
    ``late_from`` on, the times are ``late`` instead."""
    sums = {i: [0.0, 0.0] for i in per_op}
    readings = []
    for s in range(seconds + 1):
        if s:
            times = late if late_from is not None and s > late_from else per_op
            transfer = min(times.values())
            for i, t in times.items():
                sums[i][0] += STEP_OPS * t
                sums[i][1] += STEP_OPS * transfer * bus_rate
        readings.append(reading_at(start + s, *(rank(comm="0xdp", rank=i, pid=1000 + i, n_nodes=n_nodes, ops=STEP_OPS * s,
                                                     exec_s=sums[i][0], bus=sums[i][1]) for i in per_op)))
    return view_of(readings)


def test_the_spread_across_ranks_is_the_wait_for_the_last_one():
    # GPU 2 arrives 0.18 s late at each all-reduce that moves its data in 0.02 s.
    joined = join_ranks_to_gpus(job({0: 0.2, 1: 0.2, 2: 0.02, 3: 0.2}), node()).gpus
    assert joined["GPU-0"].peer_wait_ratio == pytest.approx(0.9)
    assert joined["GPU-0"].waited_for_ratio is None
    assert joined["GPU-2"].peer_wait_ratio == pytest.approx(0.0)
    assert joined["GPU-2"].waited_for_ratio == pytest.approx(0.9)
    # the transfer's own bandwidth, the waits taken out
    assert joined["GPU-0"].transfer_bytes_per_second == pytest.approx(20e9)
    assert joined["GPU-0"].bus_bytes_per_second == pytest.approx(2e9)


def test_a_large_message_is_long_on_every_rank_alike():
    joined = join_ranks_to_gpus(job({0: 0.4, 1: 0.4, 2: 0.4, 3: 0.4}), node()).gpus
    assert all(g.peer_wait_ratio == pytest.approx(0.0) for g in joined.values())
    assert all(g.waited_for_ratio in (None, pytest.approx(0.0)) for g in joined.values())


def test_a_rank_alone_on_the_node_has_no_spread():
    joined = join_ranks_to_gpus(job({0: 0.2}), node()).gpus
    assert joined["GPU-0"].peer_wait_ratio is None


def activity(footprint):
    n = len(footprint)
    return GpuActivity("utilization", [1.0] * n, [0.0] * n, list(footprint), 0.8, [0.0] * n)


def collectives(**kw):
    base = dict(uuid="GPU-0", index=0, owner="job", ranks=1, matched_by="pid", exec_ratio=0.4,
                bus_bytes_per_second=None, capacity_bytes_per_second=None, capacity="", bus_capacity_ratio=None,
                last_operation_age_seconds=0.5)
    base.update(kw)
    return GpuCollectives(**base)


IN_COLLECTIVE = [0.0, 0.8, 0.8, 0.0, 0.8, 0.0]


def test_most_of_the_collective_time_waiting_for_a_peer_is_sync():
    act = activity(IN_COLLECTIVE)
    assert timing.sync(collectives(peer_wait_ratio=0.9), act) == [0.0, DIRECT, DIRECT, 0.0, DIRECT, 0.0]
    # a collective long only because its message is large: no spread, and the host's
    # inference of a wait for a local peer is dropped
    assert timing.sync(collectives(peer_wait_ratio=0.02), act) == [0.0] * 6
    # without the timing, the host's evidence stands
    assert timing.sync(None, act) is None
    assert timing.sync(collectives(peer_wait_ratio=None), act) is None


def test_the_last_rank_is_the_straggler_only_where_the_others_wait_for_it():
    assert timing.straggler(collectives(peer_wait_ratio=0.0, waited_for_ratio=0.9)) is True
    assert timing.straggler(collectives(peer_wait_ratio=0.0, waited_for_ratio=0.05)) is False
    assert timing.straggler(collectives(peer_wait_ratio=0.0)) is False
    assert timing.straggler(None) is None


def inter_node(ratio, **kw):
    return collectives(capacity="nic", capacity_bytes_per_second=25e9, peer_wait_ratio=0.0,
                       transfer_capacity_ratio=ratio, bus_capacity_ratio=ratio, **kw)


BUSY = [5e9] * 6
MIN_RATE = 10e6


def test_a_slow_transfer_on_busy_links_is_network():
    act = activity(IN_COLLECTIVE)
    assert timing.network(inter_node(0.3), act, [BUSY], MIN_RATE) == [0.0, DIRECT, DIRECT, 0.0, DIRECT, 0.0]


def test_a_full_speed_transfer_is_not_network_on_this_count():
    # a large message at the links' speed: long, but the network delivers what it can
    assert timing.network(inter_node(0.8), activity(IN_COLLECTIVE), [BUSY], MIN_RATE) is None


def test_a_late_rank_on_another_node_leaves_the_ports_quiet():
    # the collective's bus bandwidth is low, but the ports carry bytes in one of its three instants
    quiet = [0.0, 0.0, 0.0, 0.0, 5e9, 0.0]
    assert timing.network(inter_node(0.3), activity(IN_COLLECTIVE), [quiet], MIN_RATE) is None


def test_small_messages_leave_the_ports_at_noise():
    assert timing.network(inter_node(0.05), activity(IN_COLLECTIVE), [[1e6] * 6], MIN_RATE) is None


def test_collectives_within_the_node_and_compute_without_any_are_not_judged_on_bandwidth():
    act = activity(IN_COLLECTIVE)
    assert timing.network(collectives(capacity="nvlink", bus_capacity_ratio=0.1), act, [BUSY], MIN_RATE) is None
    assert timing.network(inter_node(0.3), act, [], MIN_RATE) is None
    # a long compute phase with no collective: nothing in a collective to explain
    assert timing.network(inter_node(0.3), activity([0.0] * 6), [BUSY], MIN_RATE) is None


def test_a_nic_shared_by_gpus_gives_each_its_share():
    port = RdmaPortData(1, "InfiniBand", "", 4, "", 5, "", 50e9, "4X", "NDR", {}, {})
    fabric = RdmaData((RdmaDeviceData("mlx5_0", "0000:1a:00.0", 0, "", "", "", "", (port,)),))
    shared = node(2, nics={0: {"mlx5_0": "PIX"}, 1: {"mlx5_0": "PIX"}})
    joined = join_ranks_to_gpus(job({0: 0.2, 1: 0.2}, n_nodes=2), shared, fabric).gpus
    assert joined["GPU-0"].capacity_bytes_per_second == pytest.approx(25e9)
    alone = node(2, nics={0: {"mlx5_0": "PIX", "mlx5_1": "SYS"}, 1: {"mlx5_0": "SYS", "mlx5_1": "PIX"}})
    assert join_ranks_to_gpus(job({0: 0.2, 1: 0.2}, n_nodes=2), alone, fabric).gpus["GPU-0"].capacity_bytes_per_second \
        == pytest.approx(50e9)


def verdict(uuid, idle, sync_share):
    waits = dict.fromkeys(CAUSES, 0.0)
    waits["sync"] = sync_share
    return GpuVerdict(uuid[-1], uuid, "job", True, "sync" if sync_share else "none",
                      Attribution(100, idle, waits, 0.0))


def test_the_timing_names_the_straggler_where_the_host_would_name_another():
    registry()
    settings = resolve([])[0]
    # GPU-1 idles least (the host would name it), but NCCL's timing says GPU-2 arrived last
    results = [verdict("GPU-0", 0.4, 0.35), verdict("GPU-1", 0.05, 0.0), verdict("GPU-2", 0.3, 0.0)]
    assert [r.straggler for r in _mark_stragglers(results, settings)] == [False, True, False]
    marked = _mark_stragglers(results, settings, {"GPU-0": False, "GPU-1": False, "GPU-2": True})
    assert [r.straggler for r in marked] == [False, False, True]
    # the timing names nobody: nobody is marked, whatever the host would say
    assert not any(r.straggler for r in _mark_stragglers(results, settings, {"GPU-0": False, "GPU-1": False}))


# -- through the verdict ---------------------------------------------------------------------

def _through_verdict(per_op: dict[int, float] | None, compute=(0.6, 0.6, 0.9), bus_rate=20e9, port_rate=None,
                     **lateness):
    """Three GPUs of one job, 60 s: each computes ``compute[i]`` of each 1 s step and sits
    in NCCL's resident kernel (SM at its footprint, memory resting) for the rest. By default
    GPUs 0 and 1 are resident while GPU 2 still computes: to the host, a wait for a peer.
    ``per_op``: NCCL Inspector's mean time per collective of each GPU's rank (None: no
    records). ``port_rate``: the communicator spans nodes, each GPU has its own NIC (50 GB/s),
    whose port carries this many bytes a second throughout."""
    from gpuwait.analysis.verdict import VerdictAnalyser
    from gpuwait.collectors.gpu.payload import OwnerUse
    from gpuwait.core.plugin import AnalysisInputs
    from gpuwait.core.reading import Reading
    from gpuwait.core.ring import WindowView
    registry()
    settings = resolve([])[0]
    step = settings.sample_interval
    times = [round(i * step, 6) for i in range(int(60 / step) + 1)]
    columns = {}
    for index in range(3):
        key = (str(index), f"GPU-{index}")
        busy = [(t % 1.0) < compute[index] - 1e-9 for t in times]
        columns[("util", *key)] = [1.0] * len(times)
        columns[("mem", *key)] = [0.5 if b else 0.01 for b in busy]
        columns[("sm", *key)] = [0.8 if b else 0.12 for b in busy]
        columns[("dram", *key)] = [0.5 if b else 0.01 for b in busy]
    slow = [float(t) for t in range(0, 61, 5)]
    owner_view = WindowView(slow, {("owner_cpu", "job"): [2.0 * t for t in slow]})
    spans = port_rate is not None
    devices = GpuDeviceData(True, "", "570.124.06", "12.8", tuple(
        GpuDevice(i, f"GPU-{i}", True, processes=(GpuProcess(1000 + i, 1e9),), owners=(OwnerUse("job", 1),),
                  nics={f"mlx5_{i}": "PIX"} if spans else {})
        for i in range(3)))
    views = {"gpu": WindowView(times, columns), "gpu_device": owner_view}
    latest = {"gpu_device": Reading("gpu_device", 60.0, devices)}
    if per_op is not None:
        views["nccl"] = job(per_op, bus_rate=bus_rate, n_nodes=2 if spans else 1, seconds=60, start=0.0, **lateness)
    if spans:
        port = RdmaPortData(1, "InfiniBand", "", 4, "", 5, "", 50e9, "4X", "NDR", {}, {})
        latest["rdma"] = Reading("rdma", 60.0, RdmaData(tuple(
            RdmaDeviceData(f"mlx5_{i}", "0000:1a:00.0", 0, "", "", "", "", (port,)) for i in range(3))))
        views["rdma_traffic"] = WindowView(times, {
            (kind, f"mlx5_{i}", 1, "InfiniBand"): [port_rate / 2 * t for t in times]
            for i in range(3) for kind in ("tx", "rx")})
    inputs = AnalysisInputs(views, {}, latest, 60.0)
    return {g.index: g for g in VerdictAnalyser()(inputs, settings).gpus}


def test_without_records_the_host_infers_the_wait_for_a_peer():
    got = _through_verdict(None)
    assert (got["0"].verdict, got["1"].verdict, got["2"].verdict) == ("sync", "sync", "none")
    assert got["2"].straggler


def test_records_of_a_late_rank_confirm_the_wait_and_name_it():
    got = _through_verdict({0: 0.4, 1: 0.4, 2: 0.1})
    assert (got["0"].verdict, got["1"].verdict, got["2"].verdict) == ("sync", "sync", "none")
    # all of GPU 0's time in its kernel is the wait, not only the part GPU 2 was seen computing
    assert got["0"].attribution.wait_ratio["sync"] > _through_verdict(None)["0"].attribution.wait_ratio["sync"]
    assert [g.straggler for g in got.values()] == [False, False, True]


def test_records_without_spread_overrule_the_hosts_inference():
    # Every rank's collectives take as long: nobody waited for a late rank, whatever the
    # footprints looked like; the resident instants are left unexplained.
    got = _through_verdict({0: 0.4, 1: 0.4, 2: 0.4})
    assert got["0"].verdict != "sync" and got["0"].attribution.wait_ratio["sync"] == 0.0
    assert not any(g.straggler for g in got.values())


def test_records_of_a_transfer_under_the_links_speed_on_busy_ports_are_network():
    # Every rank in lockstep, 0.4 s of each step in a collective across nodes whose transfer
    # runs at 10 GB/s on 50 GB/s NICs. The ports carry bytes throughout (other buckets'
    # traffic): they do not line up with the dips, so the host has no link evidence.
    lockstep = (0.6, 0.6, 0.6)
    host = _through_verdict(None, compute=lockstep, port_rate=5e9)
    assert {g.verdict for g in host.values()} == {"none"}
    got = _through_verdict({0: 0.4, 1: 0.4, 2: 0.4}, compute=lockstep, bus_rate=10e9, port_rate=5e9)
    assert {g.verdict for g in got.values()} == {"network"}
    # the same collectives at the links' speed: long because the message is large, and
    # nothing here says the network underdelivers
    full = _through_verdict({0: 0.4, 1: 0.4, 2: 0.4}, compute=lockstep, bus_rate=45e9, port_rate=5e9)
    assert {g.verdict for g in full.values()} == {"none"}
    # ports at noise while the collectives run slow: not the network (a late rank elsewhere)
    quiet = _through_verdict({0: 0.4, 1: 0.4, 2: 0.4}, compute=lockstep, bus_rate=10e9, port_rate=1e6)
    assert {g.verdict for g in quiet.values()} == {"none"}


def test_the_timing_names_a_straggler_the_hosts_idle_shares_do_not_separate():
    # GPU 0's rank arrives last at every collective; its footprint-looking instants are
    # not waits, by NCCL's timing, so it computes the longest.
    got = _through_verdict({0: 0.1, 1: 0.4, 2: 0.4})
    assert [g.straggler for g in got.values()] == [True, False, False]


def test_a_lateness_that_began_recently_is_judged_on_the_recent_reads():
    # GPU 2's rank has been late for the last 15 s only: over the whole window the spread is
    # diluted below half, over the recent reads it is most of the others' collective time.
    view = job({0: 0.4, 1: 0.4, 2: 0.4}, seconds=60, start=0.0, late_from=45, late={0: 0.4, 1: 0.4, 2: 0.1})
    whole = join_ranks_to_gpus(view, node(3)).gpus["GPU-0"]
    recent = join_ranks_to_gpus(since(view, 45.0), node(3)).gpus["GPU-0"]
    assert whole.peer_wait_ratio < timing.MOST <= recent.peer_wait_ratio
    # the recent instants take the recent timing; the earlier ones the window's, or the host's
    host = [1.0] * 6
    assert timing.over([0.0] * 6, [DIRECT] * 6, 4, host) == [0.0] * 4 + [DIRECT] * 2
    assert timing.over(None, [DIRECT] * 6, 4, host) == [1.0] * 4 + [DIRECT] * 2
    assert timing.over(None, None, 4, host) is None
    # through the verdict: the short window raises it
    got = _through_verdict({0: 0.4, 1: 0.4, 2: 0.4}, late_from=45, late={0: 0.4, 1: 0.4, 2: 0.1})
    assert (got["0"].verdict, got["1"].verdict) == ("sync", "sync")


def test_a_network_that_slowed_down_recently_is_judged_on_the_recent_reads():
    # over the window the transfer averages 0.8 of the NICs' rate; over the recent reads 0.3
    act = activity(IN_COLLECTIVE)
    got = timing.timed(inter_node(0.8), inter_node(0.3), act, [BUSY], 3, [0.0] * 6, MIN_RATE)
    assert got.network == [0.0, 0.0, 0.0, 0.0, DIRECT, 0.0]
    assert timing.timed(inter_node(0.8), inter_node(0.8), act, [BUSY], 3, [0.0] * 6, MIN_RATE).network is None
    # and the straggler is a statement about the window
    assert got.straggler is False
    assert timing.timed(None, None, act, [BUSY], 3, [1.0] * 6, MIN_RATE) == timing.Timed([1.0] * 6, None, None)
