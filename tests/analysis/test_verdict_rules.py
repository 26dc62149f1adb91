"""The verdict's rules one at a time, each on both sides of its line: the GPU activity
(fractional idle, end-stamped samples, a resident collective's footprint and its
look-alikes), sync and network evidence, the CPU quota sign, owner scope and hysteresis."""

import math

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from gpuwait.analysis.activity import GpuActivity, centred, gpu_activity
from gpuwait.analysis.attribution import DIRECT, HOST, INFERRED
from gpuwait.analysis.evidence.data_pipeline import DataPipeline
from gpuwait.analysis.evidence.network import _in_waits
from gpuwait.analysis.evidence.sync import sync
from gpuwait.analysis.timeseries import Grid
from gpuwait.analysis.verdict import Hysteresis, _Owned, _raised, _widened
from gpuwait.analysis.attribution import Attribution
from gpuwait.core.facts import CAUSES
from gpuwait.core.plugin import AnalysisInputs
from gpuwait.core.registry import registry, resolve
from gpuwait.core.ring import Column, WindowView

GPU = ("0", "GPU-0")
NAN = math.nan


@pytest.fixture(scope="module")
def settings():
    registry()
    return resolve([])[0]


def view_of(times, **signals):
    return WindowView(list(times), {(signal, *GPU): list(values) for signal, values in signals.items()})


def test_an_instant_takes_the_sample_whose_period_covers_the_middle_of_its_step():
    # Samples every 0.2 s stamped at the end of their period; the grid every 0.1 s. The
    # instant 0.2 stands for the step (0.2, 0.3], which the sample stamped 0.4 covers.
    column = Column([0.2, 0.4, 0.6, 0.8], [1.0, 0.0, 0.5, 1.0])
    grid = Grid([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], 0.1)
    assert centred(grid, column) == [1.0, 0.0, 0.0, 0.5, 0.5, 1.0, 1.0]


def test_utilization_lines_up_with_the_link_rate_of_the_same_step():
    # A link carries bytes during (1.0, 1.5] only; the driver, sampling every 0.1 s, reports
    # the GPU idle for exactly the periods ending in (1.0, 1.5]. On the grid, the idle
    # instants are the instants the link's rate is high, not one step later.
    times = [round(i * 0.1, 1) for i in range(30)]
    counter, total = [], 0.0
    for t in times:
        counter.append(total)
        total += 1e9 if 1.0 <= t < 1.5 else 0.0
    util = Column(times, [0.0 if 1.0 < t <= 1.5 else 1.0 for t in times])
    grid = Grid(times, 0.1)
    rates = grid.rates(Column(times, counter), 0.5)
    on_grid = centred(grid, util)
    busy_link = [i for i, r in enumerate(rates) if r == r and r > 0]
    idle_gpu = [i for i, u in enumerate(on_grid) if u == 0.0]
    assert busy_link == idle_gpu == [10, 11, 12, 13, 14]


def test_idle_is_one_minus_utilization(settings):
    times = [i * 0.1 for i in range(50)]
    view = view_of(times, util=[0.5] * 50)
    act = gpu_activity(view, Grid(times, 0.1), GPU, settings)
    assert act.signal == "utilization"
    assert all(x == pytest.approx(0.5) for x in act.idle[:-2])
    assert not any(act.footprint)


def _gpm(settings, sm, dram, util=None):
    n = len(sm)
    times = [i * 0.1 for i in range(n)]
    view = view_of(times, util=util or [1.0] * n, sm=sm, dram=dram)
    return gpu_activity(view, Grid(times, 0.1), GPU, settings)


def test_a_resident_collective_is_a_footprint_candidate(settings):
    # Compute at SM 0.82 with DRAM 0.5; the collective at SM 0.15 with DRAM resting, and one
    # period that is part compute, part collective (SM 0.4).
    sm = [0.82] * 30 + [0.15] * 10 + [0.4] + [0.15] * 9
    dram = [0.5] * 30 + [0.02] * 20
    act = _gpm(settings, sm, dram)
    assert act.signal == "sm_active"
    # (Each instant takes the samples that cover its step: the next ones; the last has none.)
    # At the collective's own level the whole instant is its wait; the mixed one for the share
    # of its period the collective held, (0.82 - 0.4) / (0.82 - 0.15).
    assert all(f == 0.0 for f in act.footprint[:29])
    assert act.footprint[29:49] == pytest.approx([1.0] * 10 + [(0.82 - 0.4) / (0.82 - 0.15)] + [1.0] * 9)
    assert all(x == 0.0 for x in act.idle[:49])  # utilization 100 %: no kernel-free time


def test_memory_bound_compute_is_not_a_footprint(settings):
    # A phase of low SM activity that streams memory is compute, not a collective.
    sm = [0.82] * 30 + [0.3] * 20
    dram = [0.3] * 30 + [0.9] * 20
    assert not any(_gpm(settings, sm, dram).footprint)


def test_a_period_part_wide_kernels_part_wait_is_idle_for_the_wait_only(settings):
    # Kernels keeping 39 % of the SMs busy ran for a fifth of each period: SM activity reads
    # 0.078, under the floor, but what ran was wide. The rest of the period is idle, and no
    # kernel was resident in it.
    act = _gpm(settings, [0.39 * 0.2] * 50, [0.1] * 50, util=[0.2] * 50)
    assert act.idle[:49] == pytest.approx([0.8] * 49)
    assert not any(act.resident)
    # The same SM activity from kernels that ran the whole period is narrow kernels.
    act = _gpm(settings, [0.39 * 0.2] * 50, [0.1] * 50, util=[1.0] * 50)
    assert all(x == 1.0 for x in act.idle[:49])
    assert act.resident[:49] == pytest.approx([1.0] * 49)


def test_a_gpu_that_never_computes_wide_has_no_footprint(settings):
    # Tiny kernels throughout (no working level to fall from): idle by the SM floor instead.
    act = _gpm(settings, [0.02] * 50, [0.01] * 50)
    assert not any(act.footprint)
    assert all(x == 1.0 for x in act.idle[:49])  # the last instant's samples are not in yet


def activity(idle, footprint, signal="sm_active"):
    return GpuActivity(signal, [1 - x for x in idle], list(idle), list(footprint), 0.8, [0.0] * len(idle))


def test_sync_needs_a_resident_wait_and_a_peer_not_arrived():
    me, peer = ("0", "a"), ("1", "b")
    owner_of = {me: "job", peer: "job"}
    waiting = activity([0.0, 0.0, 1.0, 0.0], [0.8, 0.8, 0.0, 0.8])
    computing_then_idle = activity([0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.8])
    got = sync(me, "job", {me: waiting, peer: computing_then_idle}, owner_of)
    # peer computing -> direct; peer kernel-free -> inferred; this GPU kernel-free -> nothing
    # (with NCCL a GPU at the barrier is never kernel-free); both resident -> nothing.
    assert got == [DIRECT, INFERRED, 0.0, 0.0]
    assert sync(me, "", {me: waiting, peer: computing_then_idle}, owner_of) == [0.0] * 4
    other = {me: "job", peer: "other-job"}
    assert sync(me, "job", {me: waiting, peer: computing_then_idle}, other) == [0.0] * 4


def test_bursts_in_the_waits_align_and_bursts_at_random_do_not():
    waiting = [1.0, 1.0, 0.0, 0.0, 0.0] * 20
    in_waits = [True, True, False, False, False] * 20
    assert _in_waits(in_waits, waiting, 0.8)
    on_its_own_rhythm = [True, False, False] * 33 + [True]
    assert not _in_waits(on_its_own_rhythm, waiting, 0.8)
    # A GPU that always waits: every link's bursts fall in the waits; that tells nothing.
    assert not _in_waits(in_waits, [1.0] * 100, 0.8)


def pipeline(settings, n):
    inputs = AnalysisInputs(views={}, stats={}, latest={}, end=0.0)
    return DataPipeline(inputs, Grid([float(i) for i in range(n)], 1.0), settings, 3.0)


def test_runnable_threads_beyond_the_cpu_received_are_a_refused_cpu(settings):
    p = pipeline(settings, 10)
    # A pod held at 6 CPUs with 24 decode threads always runnable.
    assert p.refused([6.0] * 10, [24.0] * 10) == [DIRECT] * 10
    # A server whose snapshot sometimes catches a few threads runnable at 0.45 cores.
    assert p.refused([0.45] * 10, [0, 0, 3, 0, 1, 0, 0, 2, 0, 0]) == [0.0] * 10
    # Sixteen saturated workers get the sixteen cores they ask for.
    assert p.refused([16.0] * 10, [17.0] * 10) == [0.0] * 10


def test_a_saturated_core_counts_for_an_owner_that_uses_cpu(settings):
    p = pipeline(settings, 3)
    p.saturated = [2.0, 2.0, 0.0]
    assert p.evidence([3.0, 0.1, 3.0]) == [INFERRED, 0.0, 0.0]
    assert p.evidence(None) == [HOST, HOST, 0.0]


def test_an_owner_using_less_than_a_core_is_not_what_saturates_one(settings):
    # A launch-bound server spinning only while its short kernels run uses 0.6 of a core; a
    # core saturated beside it belongs to another tenant. A decoder thread that is the
    # bottleneck runs without pause: one core's worth or more.
    p = pipeline(settings, 4)
    p.saturated = [1.0, 1.0, 1.0, 1.0]
    assert p.evidence([0.6, 0.6, 1.0, 4.0]) == [0.0, 0.0, INFERRED, INFERRED]


def test_saturated_cores_of_threads_spinning_on_their_gpus_are_not_data_work(settings):
    # Eight ranks' main threads spin in cudaStreamSynchronize through their kernels and their
    # synchronous copies: eight saturated cores, all of them spin. A ninth saturated core is
    # a decoder (or any other work of the owner's) beyond them.
    p = pipeline(settings, 3)
    p.saturated = [8.0, 9.0, 8.0]
    assert p.evidence([13.0] * 3, [8.0, 8.0, 7.0]) == [0.0, INFERRED, INFERRED]
    # A thread counts as spinning only where its GPU kept it for the whole instant: where its
    # GPU idled part of it and the thread stayed saturated, it worked then.
    busy = [[1.0, 0.5, 0.95], [0.92, 1.0, float("nan")]]
    assert p.spinning_threads(busy, threads=2) == [2.0, 1.0, 1.0]
    # One process driving both GPUs spins one thread.
    assert p.spinning_threads(busy, threads=1) == [1.0, 1.0, 1.0]


def test_a_copy_holds_its_thread_for_as_long_as_the_link_carries_it(settings):
    from gpuwait.analysis.verdict import _spinning
    from gpuwait.collectors.gpu.payload import GpuDevice
    from gpuwait.nvml.values import GpuProcess, PcieLink

    # One rank: computing 60 % of each second, then a synchronous copy from pageable memory
    # for 40 %, at 27 GB/s (the host's memcpy rate, under half of the Gen5 link's).
    n = 50
    copying = [i % 10 >= 6 for i in range(n)]
    times, view = _copies(lambda i: 27e9 * 0.1 if copying[i] else 0.0)
    idle = [1.0 if c else 0.0 for c in copying]
    act = GpuActivity("utilization", [1 - x for x in idle], idle, [0.0] * n, None, [0.0] * n)
    device = {GPU[1]: GpuDevice(index=0, uuid=GPU[1], up=True, pcie=PcieLink(5, 16, 5, 16, 5),
                                processes=(GpuProcess(100, None),))}
    grid = Grid(times, 0.1)
    quiet = [0.0] * n
    spun = _spinning({GPU: "job"}, {GPU: act}, device, view, grid, pipeline(settings, n), quiet)["job"]
    # Where the copy spans the instant the thread is held all of it; at the copy's edges only
    # for what the bytes take at the link's capacity.
    assert spun == [0.0 if c and not (copying[i - 1] and copying[i + 1] and i < n - 2) else 1.0
                    for i, c in enumerate(copying[:-1])] + [0.0]
    # Without the copy its thread would be free in the idle instants: saturated there, it works.
    times, still = _copies(lambda i: 0.0)
    spun = _spinning({GPU: "job"}, {GPU: act}, device, still, grid, pipeline(settings, n), quiet)["job"]
    assert spun == [0.0 if c else 1.0 for c in copying]


def _copies(bytes_per_instant, n=50):
    """A GPU's PCIe byte counter on a 0.1 s grid moving ``bytes_per_instant(i)`` in instant i."""
    times = [i * 0.1 for i in range(n)]
    counter, total = [], 0.0
    for i in range(n):
        counter.append(total)
        total += bytes_per_instant(i)
    return times, view_of(times, pcie_rx=counter, pcie_tx=[0.0] * n)


def test_a_copy_spanning_the_idle_instants_is_a_host_copy_unless_a_nic_moves_its_bytes(settings):
    from gpuwait.analysis.evidence.host_transfer import host_copies, host_transfer
    from gpuwait.collectors.gpu.payload import GpuDevice
    from gpuwait.nvml.values import PcieLink

    # 40 % of each second a copy from pageable memory at 27 GB/s, under half of Gen5 x16;
    # the GPU runs no kernel meanwhile.
    n = 50
    copying = [i % 10 >= 6 for i in range(n)]
    times, view = _copies(lambda i: 27e9 * 0.1 if copying[i] else 0.0)
    idle = [1.0 if c else 0.0 for c in copying]
    device = GpuDevice(index=0, uuid=GPU[1], up=True, pcie=PcieLink(5, 16, 5, 16, 5))
    grid = Grid(times, 0.1)
    assert not any(host_transfer(view, grid, GPU, device, settings))  # not near the link's capacity
    quiet_nics = [0.0] * n
    # The copy's middle instants: it was in flight before each began and after it ended (the
    # instants at its edges are left to the verdict's one-instant widening).
    # (The last instant's rate is not known yet.)
    assert [i for i, b in enumerate(host_copies(view, grid, GPU, device, idle, quiet_nics)) if b] == [
        i for i in range(1, n - 2) if copying[i - 1] and copying[i] and copying[i + 1]]
    # The same bytes through the GPU's link while a NIC moves as many: GPUDirect RDMA, the
    # network's bytes, not a host copy.
    rdma = [27e9 if c else 0.0 for c in copying]
    assert not any(host_copies(view, grid, GPU, device, idle, rdma))
    # A GPU waiting for its loader, each batch copied in a few milliseconds when it comes: the
    # copies span no instant, the wait is the loader's.
    times, batches = _copies(lambda i: 80e6 if i % 3 == 2 else 0.0)
    waiting = [1.0 if i % 3 else 0.5 for i in range(n)]
    assert not any(host_copies(batches, grid, GPU, device, waiting, quiet_nics))
    # Traffic that never rises above a trickle is no copy.
    times, trickle = _copies(lambda i: 1e5)
    assert not any(host_copies(trickle, grid, GPU, device, [1.0] * n, quiet_nics))


def test_the_idle_a_copy_into_the_gpu_covers_waited_for_the_copy(settings):
    from gpuwait.analysis.attribution import attribute, verdict
    from gpuwait.analysis.evidence.host_transfer import input_copy_share
    from gpuwait.collectors.gpu.payload import GpuDevice
    from gpuwait.nvml.values import PcieLink

    # Each 1 s step a synchronous copy from pinned memory at 25 GB/s on a Gen4 x16 link
    # (31.5 GB/s) for 0.3 s, then the kernels that read it; the loader's workers decode the
    # next batches meanwhile, their cores saturated.
    n = 50
    step = [i % 10 for i in range(n)]
    times, view = _copies(lambda i: 2.5e9 if step[i] < 3 else 0.0, n=n)
    device = GpuDevice(index=0, uuid=GPU[1], up=True, pcie=PcieLink(4, 16, 4, 16, 4))
    grid = Grid(times, 0.1)
    quiet = [0.0] * n
    share = input_copy_share(view, grid, GPU, device, quiet)
    capacity = 16 * 16e9 * 128 / 130 / 8  # Gen4: 16 GT/s a lane, 128b/130b
    # No copy outruns the link: 2.5 GB in 0.1 s ran at least 2.5e9 / capacity / 0.1 of it.
    assert share[:4] == pytest.approx([2.5e9 / capacity / 0.1] * 3 + [0.0])
    # The same bytes while a NIC moves as many: GPUDirect RDMA writing into the GPU.
    assert not any(input_copy_share(view, grid, GPU, device, [25e9] * n))
    assert not any(input_copy_share(view, grid, GPU, GpuDevice(index=0, uuid=GPU[1], up=True), quiet))

    # The GPU idles through the copy: what the copy covers of the idle time is the copy's,
    # whatever the saturated cores suggest; the rest is theirs.
    idle = [1.0 if s < 3 else 0.0 for s in step]
    loader = {"data_pipeline": [INFERRED] * n}
    a = attribute(idle, loader, [True] * n, [False] * n, copying=share)
    covered = sum(min(x, c) for x, c in zip(idle, share)) / n
    assert covered > 0.2
    assert a.wait_ratio["host_transfer"] == pytest.approx(covered)
    assert a.wait_ratio["data_pipeline"] == pytest.approx(sum(idle) / n - covered)
    assert verdict(a) == "host_transfer"
    assert verdict(attribute(idle, loader, [True] * n, [False] * n)) == "data_pipeline"
    # A checkpoint's own pause: the copy is part of it.
    paused = attribute(idle, {**loader, "checkpoint": [DIRECT] * n}, [True] * n, [False] * n, copying=share)
    assert paused.wait_ratio["host_transfer"] == 0.0
    assert verdict(paused) == "none"
    # The look-alike: a GPU that waits for its loader most of each step, then takes its batch
    # in a copy of a few milliseconds: the wait stays the loader's.
    waiting = [1.0 if s < 6 else 0.0 for s in step]
    times, batches = _copies(lambda i: 0.2e9 if step[i] == 5 else 0.0, n=n)
    b = attribute(waiting, loader, [True] * n, [False] * n, copying=input_copy_share(batches, grid, GPU, device, quiet))
    assert 0.0 < b.wait_ratio["host_transfer"] < 0.01
    assert verdict(b) == "data_pipeline"


def test_a_metadata_bound_nfs_reader_waits_on_the_server_all_the_time(settings):
    from gpuwait.analysis.evidence.storage import storage

    times = [float(t) for t in range(0, 21)]
    mount = "/datasets"

    def nfs(ops_per_s, ms_each):
        # Each small file costs a LOOKUP, an OPEN and a GETATTR, fast one by one: no PSI io
        # (RPC waits are not io_schedule sleeps), no slow operation, but by Little's law
        # ops x latency tasks are waiting on the server at every instant.
        view = WindowView(times, {
            ("ops", mount, op): [ops_per_s * t for t in times] for op in ("LOOKUP", "OPEN", "GETATTR")
        } | {
            ("exec", mount, op): [ops_per_s * ms_each * t for t in times] for op in ("LOOKUP", "OPEN", "GETATTR")
        })
        return AnalysisInputs(views={"nfs": view}, stats={}, latest={}, end=20.0)

    grid = Grid([5.5 + t for t in range(10)], 1.0)
    # 3 x 200 operations a second at 2 ms: 1.2 callers always waiting.
    assert storage(nfs(200.0, 2.0), grid, settings, 3.0) == [True] * 10
    # The same rate at 1 ms is a mount that answers faster than it is asked: 0.6 callers.
    assert storage(nfs(200.0, 1.0), grid, settings, 3.0) == [False] * 10
    # Whose wait it is follows the owner scope: another tenant's reader leaves an owner whose
    # threads never block on IO without storage evidence.
    host = storage(nfs(200.0, 2.0), grid, settings, 3.0)
    assert _Owned(True, None, [], [False] * 10).scoped(host) == [0.0] * 10
    assert _Owned(True, None, [], [True] * 10).scoped(host) == [DIRECT] * 10


def test_io_evidence_is_the_owners_only_when_its_threads_wait_on_io():
    host = [True, False, True]
    assert _Owned(True, None, [], [True] * 3).scoped(host) == [DIRECT, 0.0, DIRECT]
    assert _Owned(True, None, [], [False] * 3).scoped(host) == [0.0, 0.0, 0.0]
    assert _Owned(False, None, [], [False] * 3).scoped(host) == [HOST, 0.0, HOST]
    # Writeback is done by the kernel's flusher threads: a quiet owner may still be saving.
    assert _Owned(True, None, [], [False] * 3).writes(host) == [HOST, 0.0, HOST]


def _attr(idle, **waits):
    ratios = dict.fromkeys(CAUSES, 0.0)
    ratios.update(waits)
    return Attribution(100, idle, ratios, 0.0)


def test_the_short_window_raises_a_dominant_new_wait_only():
    quiet_then_storage = _attr(0.6, storage=0.55, insufficient_work=0.05)
    assert _raised("none", quiet_then_storage, _rules()) == "storage"
    mixed = _attr(0.6, storage=0.3, data_pipeline=0.3)
    assert _raised("none", mixed, _rules()) == "none"
    # Losing demand or work is not raised early: the long window decides those.
    assert _raised("data_pipeline", _attr(0.9, insufficient_work=0.9), _rules()) == "data_pipeline"


def test_clock_limits_are_raised_from_the_short_window(settings):
    # A power brake asserted a few seconds ago: the recent busy time is mostly clock-limited,
    # the window's is not yet. The driver says so itself: nothing is left for the long window.
    braked = Attribution(100, 0.02, dict.fromkeys(CAUSES, 0.0), 0.6)
    assert _raised("none", braked, _rules()) == "throttled"
    # The look-alike: clocks held down now and then, under the share that makes a GPU throttled.
    brief = Attribution(100, 0.02, dict.fromkeys(CAUSES, 0.0), 0.1)
    assert _raised("none", brief, _rules()) == "none"


def _link_inputs(rates, times):
    # Received bytes of one RoCE port, as the rdma_traffic window holds them; nothing sent.
    counter, total = [], 0.0
    for i, r in enumerate(rates):
        total += r * (times[i] - times[i - 1]) if i else 0.0
        counter.append(total)
    port = ("mlx5_0", "1", "Ethernet")
    view = WindowView(list(times), {("rx", *port): counter, ("tx", *port): [0.0] * len(times)})
    return AnalysisInputs(views={"rdma_traffic": view}, stats={}, latest={}, end=times[-1])


def test_a_congested_link_is_judged_against_its_own_recent_bursts(settings):
    from gpuwait.analysis.evidence.network import Network

    # Steps of 1 s: before the change the all-reduce bursts at 40 GB/s for 0.1 s while the GPU
    # waits; after it (the last 15 s) the same bytes crawl at 8 GB/s for 0.5 s of each step.
    n, change = 600, 450
    times = [i * 0.1 for i in range(n)]
    busy, rates = [], []
    for i in range(n):
        phase = i % 10
        comm = phase == 9 if i < change else phase >= 5
        busy.append(0.15 if comm else 0.9)
        rates.append((40e9 if i < change else 8e9) if comm else 1e6)
    grid = Grid(times, 0.1)
    network = Network(_link_inputs(rates, times), grid, settings, 0.3)
    waiting = [1.0 - b for b in busy]
    ((whole, bursts_whole),) = network.alignment(busy, waiting)
    ((recent, bursts_recent),) = network.alignment(busy, waiting, start=change)
    # Against the healthy past's peak, the slow bursts are no bursts at all.
    assert not any(bursts_whole[change + 20:])
    assert recent.aligned and sum(bursts_recent[change + 20:]) >= 50
    assert not any(bursts_recent[:change])


def test_a_link_on_its_own_rhythm_is_not_aligned_in_the_recent_instants_either(settings):
    from gpuwait.analysis.evidence.network import Network

    # The look-alike: the GPU dips every 1 s, a transfer bursts every 1.7 s whatever it does.
    n, start = 600, 450
    times = [i * 0.1 for i in range(n)]
    busy = [0.15 if i % 10 == 9 else 0.9 for i in range(n)]
    rates = [5e9 if i % 17 < 3 else 1e6 for i in range(n)]
    network = Network(_link_inputs(rates, times), Grid(times, 0.1), settings, 0.3)
    ((recent, bursts),) = network.alignment(busy, [1.0 - b for b in busy], start=start)
    assert not recent.aligned and not any(bursts)


def _rules():
    from gpuwait.analysis.attribution import VerdictRules
    return VerdictRules()


def test_hysteresis_publishes_a_change_two_passes_in_a_row():
    h = Hysteresis()
    h.restart_if_discontinuous(10.0, 2.0)
    assert h.publish("g", "none", 10.0) == ("none", 0.0)
    h.restart_if_discontinuous(12.0, 2.0)
    assert h.publish("g", "storage", 12.0) == ("none", 2.0)
    h.restart_if_discontinuous(14.0, 2.0)
    assert h.publish("g", "none", 14.0) == ("none", 4.0)  # one pass of noise: nothing changes
    h.restart_if_discontinuous(16.0, 2.0)
    assert h.publish("g", "storage", 16.0) == ("none", 6.0)
    h.restart_if_discontinuous(18.0, 2.0)
    assert h.publish("g", "storage", 18.0) == ("storage", 0.0)
    h.restart_if_discontinuous(20.0, 2.0)
    assert h.publish("g", "storage", 20.0) == ("storage", 2.0)
    # A pass that does not follow the last (a new replay) starts afresh.
    h.restart_if_discontinuous(5.0, 2.0)
    assert h.publish("g", "network", 5.0) == ("network", 0.0)


def test_a_cgroup_throttled_in_its_periods_is_refused_cpu(settings):
    from gpuwait.analysis.evidence.data_pipeline import throttled
    from gpuwait.collectors.cgroup.window import OWN, PERIODS, THROTTLED

    times = [float(t) for t in range(0, 11)]
    # 10 CFS periods per second; the owner's cgroup is throttled in 7 of them, its neighbour in none.
    view = WindowView(times, {
        ("pod-a", PERIODS, OWN): [10.0 * t for t in times], ("pod-a", THROTTLED, OWN): [7.0 * t for t in times],
        ("pod-b", PERIODS, OWN): [10.0 * t for t in times], ("pod-b", THROTTLED, OWN): [0.0 for t in times],
    })
    inputs = AnalysisInputs(views={"owner_cgroup": view}, stats={}, latest={}, end=10.0)
    grid = Grid([0.5 + t for t in range(10)], 1.0)
    assert throttled(inputs, grid, "pod-a", settings) == [DIRECT] * 10
    assert throttled(inputs, grid, "pod-b", settings) == [0.0] * 10
    assert throttled(inputs, grid, "pod-c", settings) is None
    assert throttled(AnalysisInputs({}, {}, {}, 10.0), grid, "pod-a", settings) is None


def test_tiny_kernels_leave_a_resident_share_of_their_idle_time(settings):
    # SM activity under the floor counts the instant idle, but a kernel ran for as much of it
    # as utilization says (96 % here, 40 % later).
    act = _gpm(settings, [0.05] * 25 + [0.02] * 25, [0.02] * 50, util=[0.96] * 25 + [0.4] * 25)
    assert all(x == 1.0 for x in act.idle[:49])
    # (Each instant takes the sample that covers its step: the next one.)
    assert act.resident[:24] == pytest.approx([0.96] * 24)
    assert act.resident[24:49] == pytest.approx([0.4] * 25)
    # Above the floor nothing is resident idle: busy SMs are compute (or a footprint).
    assert not any(_gpm(settings, [0.82] * 50, [0.5] * 50).resident)


def _owner_scope(settings, blocked, read_bytes):
    from gpuwait.analysis.verdict import _OwnerScope

    times = [float(t) for t in range(0, 60, 5)]
    columns = {("owner_cpu", "pod:a"): [2.0 * t for t in times], ("owner_running", "pod:a"): [2.0] * len(times),
               ("owner_blocked", "pod:a"): list(blocked)}
    if read_bytes is not None:
        columns[("owner_read_bytes", "pod:a")] = list(read_bytes)
    grid = Grid(times, 0.5)
    inputs = AnalysisInputs({"gpu_device": WindowView(times, columns)}, {}, {}, times[-1])
    return _OwnerScope(inputs, grid, settings)


def test_an_owner_whose_reads_escape_every_snapshot_is_still_the_reader(settings):
    # Never caught in D state at a 5 s snapshot, but reading 40 MB/s from block devices:
    # the counter sees what the snapshots missed.
    host = [True] * 12
    scope = _owner_scope(settings, [0.0] * 12, [40e6 * 5 * i for i in range(12)])
    assert _Owned.of(scope, "pod:a").scoped(host) == [DIRECT] * 12
    # A process of the owner exiting takes its bytes out of the sum: a drop, not a rate.
    dropped = [40e6 * 5 * i for i in range(6)] + [40e6 * 5 * i - 1e9 for i in range(6, 12)]
    assert _Owned.of(_owner_scope(settings, [0.0] * 12, dropped), "pod:a").scoped(host) == [DIRECT] * 12


def test_an_owner_that_reads_nothing_from_disk_is_not_delayed_by_another_tenants_stall(settings):
    host = [True] * 12
    # Its reads come from the page cache (or it reads a little config now and then).
    for reads in ([7e9] * 12, [7e9 + 1000.0 * i for i in range(12)], None):
        assert _Owned.of(_owner_scope(settings, [0.0] * 12, reads), "pod:a").scoped(host) == [0.0] * 12
    # Seen blocked at one snapshot: its own reads wait, whatever the counter says.
    assert _Owned.of(_owner_scope(settings, [0.0] * 11 + [3.0], None), "pod:a").scoped(host) == [DIRECT] * 12


def _demand_of(settings, cores, util, processes, gpus=1, narrow=False, known_every=1):
    """One owner of ``gpus`` GPUs at utilization ``util``, ``processes`` distinct pids on them,
    using ``cores`` over the latest slow interval; ``narrow``: its kernels keep too few SMs
    busy to count as computing (idle throughout, resident for ``util``); ``known_every``: only
    every so many instants has a sample (NaN between)."""
    from gpuwait.analysis.verdict import _demand
    from gpuwait.collectors.gpu.payload import GpuDevice
    from gpuwait.collectors.gpu.window import OwnerActivity
    from gpuwait.nvml.values import GpuProcess

    times = [i * 0.1 for i in range(100)]
    members = [(str(i), f"GPU-{i}") for i in range(gpus)]
    idle, resident = ([1.0] * 100, [util] * 100) if narrow else ([1.0 - util] * 100, [0.0] * 100)
    idle = [x if i % known_every == 0 else math.nan for i, x in enumerate(idle)]
    activity = {g: GpuActivity("utilization", [util] * 100, idle, [0.0] * 100, None, resident) for g in members}
    device = {g[1]: GpuDevice(index=int(g[0]), uuid=g[1], up=True,
                              processes=(GpuProcess(1000 + int(g[0]) % processes, None),)) for g in members}
    return _demand({"o": OwnerActivity(cores, 0.0)}, {g: "o" for g in members}, activity, device,
                   Grid(times, 0.1), settings).get("o")


def test_a_server_asleep_between_requests_has_no_demand(settings):
    # Poisson requests of 55 ms GPU work: utilization 0.55, its thread spinning through each
    # kernel (CUDA's default schedule) and using 0.07 cores besides: asleep while the GPU idles.
    assert _demand_of(settings, cores=0.62, util=0.55, processes=1) is False
    # Its CPU rate and its GPU's busy share are measured over slightly different spans: a hair
    # less CPU than kernel time is still a thread spinning through its kernels.
    assert _demand_of(settings, cores=0.57, util=0.58, processes=1) is False
    # Batch-1 requests of 3 ms CPU and 1 ms of tiny kernels: the thread works while its GPU
    # idles, the GPU's work per request is what is too small (A4).
    assert _demand_of(settings, cores=0.45, util=0.18, processes=1) is True
    # A launch loop that keeps a thread busy through every gap.
    assert _demand_of(settings, cores=1.0, util=0.4, processes=1) is True


def test_a_thread_spins_through_narrow_kernels_too(settings):
    # Kernels on a few SMs for 55 % of the time: the GPU counts idle, but its host thread
    # waits in cudaStreamSynchronize for as long as they run, as for wide ones.
    assert _demand_of(settings, cores=0.62, util=0.55, processes=1, narrow=True) is False
    assert _demand_of(settings, cores=1.0, util=0.4, processes=1, narrow=True) is True


def test_an_owner_that_does_not_spin_keeps_the_plain_rule(settings):
    # Eight processes using less CPU together than their kernels ran: none spins through them,
    # the plain demand rule decides (None: not judged here).
    assert _demand_of(settings, cores=0.8, util=0.23, processes=8, gpus=8) is None
    # DDP ranks spinning through their kernels with busy loaders beside them.
    assert _demand_of(settings, cores=14.0, util=0.6, processes=8, gpus=8) is True


def test_instants_without_a_sample_are_neither_busy_nor_idle(settings):
    # On a loaded host the GPU's samples come late and the grid's instants between them are
    # unknown: the owner is judged on the instants that are known, as with every sample.
    # A server asleep between requests, its thread spinning through its kernels.
    assert _demand_of(settings, cores=0.62, util=0.55, processes=1, known_every=2) is False
    # Eight DDP ranks blocked in their collectives (1.5 cores for 8 GPUs that are never
    # without a kernel) do not spin through them: the plain rule decides, as with every sample.
    assert _demand_of(settings, cores=1.5, util=1.0, processes=8, gpus=8) is None
    assert _demand_of(settings, cores=1.5, util=1.0, processes=8, gpus=8, known_every=5) is None
    # A launch loop busy through every gap.
    assert _demand_of(settings, cores=1.0, util=0.4, processes=1, known_every=5) is True


def _footprint_gpu(pcie_rate):
    """A GPU at NCCL's footprint in its second half, its PCIe link moving ``pcie_rate`` bytes/s."""
    from gpuwait.collectors.gpu.payload import GpuDevice
    from gpuwait.nvml.values import PcieLink

    n = 100
    times = [i * 0.1 for i in range(n)]
    counter = [pcie_rate * t for t in times]
    view = view_of(times, pcie_rx=counter, pcie_tx=[0.0] * n)
    footprint = [0.0] * 50 + [0.8] * 50
    mine = GpuActivity("sm_active", [0.8] * 50 + [0.15] * 50, [0.0] * n, footprint, 0.8, [0.0] * n)
    device = GpuDevice(index=0, uuid=GPU[1], up=True, pcie=PcieLink(5, 16, 5, 16, 5))
    return view, Grid(times, 0.1), device, mine


def test_a_resident_collective_on_quiet_links_waits_for_a_peer():
    from gpuwait.analysis.evidence.sync import quiet_wait

    # Nothing moves on the GPU's link or any NIC: the collective waits for a peer's arrival.
    view, grid, device, mine = _footprint_gpu(1e5)
    waits = quiet_wait(view, grid, GPU, device, mine, [True] * 100)
    assert set(waits[:50]) == {0.0} and set(waits[52:98]) == {INFERRED}
    # The look-alike: a collective held back by the network moves its data, slowly, through
    # the GPU's PCIe link (GPUDirect RDMA): that is no peer's lateness.
    view, grid, device, mine = _footprint_gpu(5e9)
    assert not any(quiet_wait(view, grid, GPU, device, mine, [True] * 100))
    # Or through a NIC of the host while the GPU's own link is quiet (host staging elsewhere).
    view, grid, device, mine = _footprint_gpu(1e5)
    assert not any(quiet_wait(view, grid, GPU, device, mine, [False] * 100))


def test_a_process_driving_several_gpus_needs_one_busy_thread_not_one_per_gpu(settings):
    # One controller process launching for 8 GPUs that idle: one thread kept busy through the
    # gaps is a host side with work, however many GPUs it feeds.
    assert _demand_of(settings, cores=2.0, util=0.3, processes=1, gpus=8) is True
    # Eight processes, one per GPU, asleep between requests, each spinning through its kernels.
    assert _demand_of(settings, cores=8 * 0.32, util=0.3, processes=8, gpus=8) is False


def test_the_node_names_what_holds_its_gpus_back_not_the_barrier():
    from gpuwait.analysis.verdict import GpuVerdict, _node_verdict

    def gpu(i, cause):
        return GpuVerdict(str(i), f"GPU-{i}", "o", True, cause, _attr(0.4, **{cause: 0.4}))
    # Seven GPUs wait at the barrier for one whose link trained down: the node waits on the copy.
    assert _node_verdict([gpu(0, "host_transfer")] + [gpu(i, "sync") for i in range(1, 8)]) == "host_transfer"
    # A straggler that computes longer has nothing named: the barrier is the node's wait.
    assert _node_verdict([gpu(0, "none")] + [gpu(i, "sync") for i in range(1, 8)]) == "sync"


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, math.nan]), max_size=9))
def test_widened_is_the_largest_of_each_instant_and_its_neighbours_nan_as_max_leaves_it(values):
    got = _widened(values)
    assert len(got) == len(values)
    for i, value in enumerate(got):
        expected = max(values[max(0, i - 1):i + 2])
        assert value == expected or (value != value and expected != expected), (values, i)
