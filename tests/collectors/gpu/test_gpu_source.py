"""The gpu sources, their window rows and statistics, and the mapping to metrics, run
in-process against the NVML double."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwait.core.plugin import Snapshot
from gpuwait.core.registry import resolve
from gpuwait.collectors.gpu import metrics as gpu_exposition
from gpuwait.exposition.family import FamilyBuilder
from gpuwait.core.ring import ColumnRing
from gpuwait.core.source import HostPaths
from gpuwait.collectors.gpu.source import GpuDeviceSource, GpuSource, fast_rows
from gpuwait.collectors.gpu.window import SlotRows, reason_ratios, summarize
from nvml_support import HGX_MACHINE, MIXED_MACHINE, FakeClock, load_double
from gpuwait.nvml.gateway import Gateway


@pytest.fixture
def double():
    module = load_double()
    yield module
    if module.machine() is not None:
        module.machine().release.set()
    module.configure(None)


def settings(*flags):
    return resolve(["--sample.interval=100ms", *flags])[0]


class Rig:
    """Both sources on one gateway over the double, and a ring fed the way the sampler does."""

    def __init__(self, double, machine, clock, *flags) -> None:
        double.configure(machine, clock=clock)
        self.settings = settings(*flags)
        self.gateway = Gateway(call_timeout=0.5, retry_max=0.5, first_retry=0.05, nvml=double)
        paths = HostPaths()
        self.fast = GpuSource(paths, self.settings, gateway=self.gateway)
        self.slow = GpuDeviceSource(paths, self.settings, gateway=self.gateway)
        self.ring = ColumnRing(10_000)
        self.readings = []

    def tick(self):
        reading = self.fast.read()
        for t, values in fast_rows(reading):
            self.ring.append(t, values)
        self.readings.append(reading)
        return reading

    def close(self):
        self.gateway.close()


@pytest.fixture
def rigs():
    made = []
    yield made
    for rig in made:
        rig.close()


def rig(double, rigs, machine=HGX_MACHINE, *flags, clock=None):
    r = Rig(double, machine, clock, *flags)
    rigs.append(r)
    return r


def run_for(r: Rig, seconds: float, step: float = 0.1):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r.tick()
        time.sleep(step)


# -- SlotRows -------------------------------------------------------------------------------
def test_slot_rows_merge_many_gpus_into_one_row_per_slot():
    slots = SlotRows(0.1)
    for gpu in range(8):
        slots.add(10.02 + gpu * 0.01, ("util", str(gpu), "u"), 0.5)
    slots.add(10.05, ("util", "0", "u"), 0.7)
    slots.add(10.13, ("pcie_tx", "0", "u"), 100.0, last=True)
    slots.add(10.17, ("pcie_tx", "0", "u"), 150.0, last=True)
    rows = slots.flush(10.25)
    assert [t for t, _ in rows] == [pytest.approx(10.05), pytest.approx(10.15)]
    assert len(rows[0][1]) == 8 and rows[0][1][("util", "0", "u")] == pytest.approx(0.6)
    assert rows[1][1] == {("pcie_tx", "0", "u"): 150.0}
    assert len(slots) == 0


def test_slot_rows_hold_incomplete_slots_and_move_late_values_forward():
    slots = SlotRows(0.1)
    slots.add(1.01, "a", 1.0)
    slots.add(1.11, "a", 2.0)
    assert [t for t, _ in slots.flush(1.15)] == [pytest.approx(1.05)]
    slots.add(1.02, "b", 3.0)  # late for a slot already handed out
    rows = slots.flush(1.3)
    assert rows == [(pytest.approx(1.15), {"a": 2.0, "b": 3.0})]


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 1)), max_size=200),
       st.lists(st.floats(0, 120), max_size=20))
def test_slot_rows_never_go_back_in_time(values, flushes):
    slots = SlotRows(0.1)
    out = []
    for i, (t, v) in enumerate(values):
        slots.add(t, i % 5, v)
        if flushes and i % 7 == 0:
            out += slots.flush(flushes[i % len(flushes)])
    out += slots.flush(1e9)
    times = [t for t, _ in out]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert sum(len(row) for _, row in out) <= len(values)


# -- the fast source ------------------------------------------------------------------------
def test_fast_reading_carries_every_gpu_and_ordered_rows(double, rigs):
    r = rig(double, rigs)
    run_for(r, 1.5)
    reading = r.readings[-1]
    data = reading.data
    assert data.backend_up and len(data.gpus) == 8
    by_index = {g.index: g for g in data.gpus}
    gpu0 = by_index[0]
    assert gpu0.up and gpu0.utilization is not None and gpu0.pcie_rx_bytes > gpu0.pcie_tx_bytes > 0
    assert {"sm_active", "sm_occupancy", "tensor_active", "dram_active"} <= set(gpu0.gpm)
    assert by_index[7].clocks_event_reasons & 0x4  # SwPowerCap
    view = r.ring.view()
    assert view.times == sorted(view.times)
    # One row per 100 ms slot at most, whatever the number of GPUs.
    assert len(view) <= 1.5 / 0.1 + 3
    util0 = [v for v in view.column(("util", "0", gpu0.uuid)) if v == v]
    assert len(util0) >= 6
    # GPU 6 hangs on power reads, which the fast tier never makes: it reports normally.
    assert by_index[6].up and by_index[6].utilization is not None


def test_captures_decoded_a_second_later_give_what_they_give_at_once(double, rigs):
    """The sampler decodes a second's captures at its next analysis pass: the rows and the
    readings cannot depend on when the decoding happens."""
    r = rig(double, rigs)
    captures = []
    end = time.monotonic() + 1.2
    while time.monotonic() < end:
        captures.append(r.fast.capture())
        time.sleep(0.1)
    at_once = GpuSource(HostPaths(), r.settings, gateway=r.gateway)
    readings = [at_once.decode(c) for c in captures]
    later = [r.fast.decode(c) for c in captures]
    assert [x.data for x in later] == [x.data for x in readings]
    assert sum(len(x.data.rows) for x in later) >= 6
    assert all(g.up for x in later for g in x.data.gpus)


def test_samples_unsupported_falls_back_to_polling(double, rigs):
    r = rig(double, rigs)
    run_for(r, 0.6)
    gpu2 = next(g for g in r.readings[-1].data.gpus if g.index == 2)
    assert gpu2.samples == 0 and gpu2.utilization is not None and gpu2.memory_busy is not None
    polled = [v for v in r.ring.view().column(("util", "2", gpu2.uuid)) if v == v]
    assert len(polled) >= 3
    assert double.machine().calls["nvmlDeviceGetSamples"] > 0


def test_an_idle_gpu_with_a_dry_sample_buffer_reads_as_idle_not_absent(double, rigs):
    clock = FakeClock()
    r = rig(double, rigs, {"count": 1, "gpus": {0: {"utilization": 0.0}}}, clock=clock)
    clock.set(0.5)
    r.tick()
    # The machine clock stops: the driver's buffer has nothing new from here on.
    run_for(r, 1.3)
    last = r.readings[-1].data.gpus[0]
    assert last.samples == 0 and last.utilization == 0.0
    assert double.machine().calls["nvmlDeviceGetUtilizationRates"] >= 1


def test_backend_down_reads_succeed_without_errors(double, rigs):
    r = rig(double, rigs, None)
    reading = r.tick()
    assert reading.errors == () and reading.data.backend_up is False
    assert "libnvidia-ml.so.1" in reading.data.backend_reason
    slow = r.slow.read()
    assert slow.errors == () and slow.data.backend_up is False and slow.data.gpus == ()


def test_a_lost_gpu_is_down_and_named_in_errors(double, rigs):
    clock = FakeClock()
    machine = {"count": 3, "gpus": {1: {"lost": {"after": 1.0}}}}
    r = rig(double, rigs, machine, clock=clock)
    r.tick()
    clock.set(2.0)
    r.tick()
    reading = r.tick()
    ups = {g.index: g.up for g in reading.data.gpus}
    assert ups == {0: True, 1: False, 2: True}
    assert reading.errors == ("gpu1:lost:GPU_IS_LOST",)
    slow = r.slow.read()
    assert {g.index: g.up for g in slow.data.gpus} == {0: True, 1: False, 2: True}
    assert "gpu1:lost:GPU_IS_LOST" in slow.errors


# -- the slow source ------------------------------------------------------------------------
def test_slow_reading(double, rigs):
    clock = FakeClock()
    r = rig(double, rigs, clock=clock)
    r.slow.read()
    clock.set(1.0)
    data = r.slow.read().data
    gpus = {g.index: g for g in data.gpus}
    assert data.driver_version == "550.90.07" and data.cuda_version == "12.4"
    g0 = gpus[0]
    assert g0.info.name == "NVIDIA H100 80GB HBM3" and g0.info.gpm_supported and len(g0.info.nvlink_links) == 18
    assert g0.memory.total == 85520809984 and g0.memory.reserved > 0
    assert g0.energy_joules > 5e6 and g0.power_limit_watts == 700 and g0.temperature_celsius > 30
    assert set(g0.clocks) == {"sm", "memory"}
    assert g0.xids == {31: 1}
    assert [p.pid for p in g0.processes] == [4242] and g0.process_sm == {4242: 0.81}
    assert set(g0.peers.values()) <= {"PIX", "PHB", "NODE", "SYS"} and len(g0.peers) == 7
    assert gpus[5].pcie.generation == 4 and gpus[5].pcie.width == 8 and gpus[5].pcie.max_width == 16
    assert gpus[5].pcie_replays == 42
    link7 = next(link for link in gpus[4].nvlinks if link.link == 7)
    assert link7.up is False and link7.errors["crc_flit"] == 12
    assert gpus[7].violation_seconds["power"] > 0
    # XIDs are counted once, not on every read.
    assert r.slow.read().data.gpus[0].xids == {31: 1}


def test_mixed_machine_fallbacks(double, rigs):
    clock = FakeClock()
    r = rig(double, rigs, MIXED_MACHINE, clock=clock)
    r.slow.read()
    r.tick()
    clock.set(1.0)
    slow = {g.index: g for g in r.slow.read().data.gpus}
    fast = {g.index: g for g in r.tick().data.gpus}
    # A100 PCIe: no GPM, no PCIe byte counters (throughput samples instead), no NVLink.
    assert not slow[0].info.gpm_supported and fast[0].gpm == {}
    assert fast[0].pcie_tx_bytes is None and slow[0].pcie_throughput is not None
    assert slow[0].nvlinks == ()
    # The older reasons call answers where the newer one is missing.
    assert fast[1].clocks_event_reasons & 0x40
    # MIG: instances and their GPM, no GPU-wide utilization.
    assert slow[2].info.mig_mode is True and len(slow[2].mig) == 2
    assert fast[2].utilization is None
    clock.set(2.0)
    again = {g.index: g for g in r.slow.read().data.gpus}
    assert set(again[2].mig_gpm) == {1, 2} and again[2].mig_gpm[1]["sm_active"] > 0


# -- window statistics ----------------------------------------------------------------------
def test_window_statistics_follow_the_utilization_pattern(double, rigs):
    machine = {"count": 2, "defaults": {"sample_period": 0.1},
               "gpus": {0: {"utilization": {"period": 0.4, "duty": 0.5, "high": 0.9, "low": 0.0}},
                        1: {"utilization": 0.6, "clocks_event_reasons": ["HwThermalSlowdown"]}}}
    r = rig(double, rigs, machine)
    run_for(r, 2.5, step=0.1)
    stats = summarize(r.ring.view(), r.settings)
    by_index = {w.index: w for w in stats.gpus}
    busy, steady = by_index["0"], by_index["1"]
    assert busy.utilization_samples >= 12
    assert busy.idle_ratio == pytest.approx(0.5, abs=0.2)
    assert busy.utilization_p10 == 0.0 and busy.utilization_p90 == pytest.approx(0.9)
    assert busy.utilization_mean == pytest.approx(0.45, abs=0.12)
    assert steady.idle_ratio == 0.0 and steady.utilization_p50 == pytest.approx(0.6)
    assert steady.memory_busy_mean == pytest.approx(0.24, abs=0.02)
    assert steady.sm_active_mean == pytest.approx(0.54, abs=0.02)
    assert steady.clocks_event_ratio["hw_thermal_slowdown"] == 1.0
    assert steady.clocks_event_ratio["sw_power_cap"] == 0.0
    # 0.6 of 9e9 bytes/s received, from the byte counters.
    assert steady.pcie_rate["rx"] == pytest.approx(0.6 * 6e9, rel=0.05)
    assert steady.nvlink_rate["tx"] == pytest.approx(0.6 * 100e9, rel=0.01)


def test_idle_threshold_option(double, rigs):
    machine = {"count": 1, "defaults": {"sample_period": 0.1}, "gpus": {0: {"utilization": 0.08}}}
    r = rig(double, rigs, machine, "--collector.gpu.idle-threshold=0.1")
    run_for(r, 0.8)
    assert summarize(r.ring.view(), r.settings).gpus[0].idle_ratio == 1.0
    assert summarize(r.ring.view(), settings()).gpus[0].idle_ratio == 0.0


def test_reason_ratios():
    assert reason_ratios([0x1, 0x5, math.nan, 0x4, 0x0]) == pytest.approx(
        {"gpu_idle": 0.5, "applications_clocks_setting": 0.0, "sw_power_cap": 0.5, "hw_slowdown": 0.0,
         "sync_boost": 0.0, "sw_thermal_slowdown": 0.0, "hw_thermal_slowdown": 0.0,
         "hw_power_brake_slowdown": 0.0, "display_clock_setting": 0.0})
    assert reason_ratios([math.nan]) == {}


# -- exposition -----------------------------------------------------------------------------
def expose(r: Rig, fast, slow, stats):
    builder = FamilyBuilder()
    builder.extend(gpu_exposition.expose({"gpu": Snapshot(fast, stats), "gpu_device": Snapshot(slow, None)}, r.settings))
    return {f.name: f for f in builder.families()}


def test_exposition_is_catalog_valid_and_hides_down_gpus(double, rigs):
    machine = {"count": 2, "gpus": {1: {"lost": {"after": 1.5}}}}
    r = rig(double, rigs, machine)
    slow = r.slow.read()
    run_for(r, 1.0)
    stats = summarize(r.ring.view(), r.settings)
    families = expose(r, r.readings[-1], slow, stats)
    up = {s.labels["gpu"]: s.value for s in families["gpuwait_gpu_up"].samples}
    assert up == {"0": 1.0, "1": 1.0}
    assert {s.labels["gpu"] for s in families["gpuwait_gpu_window_utilization_mean_ratio"].samples} == {"0", "1"}
    time.sleep(max(0.0, 1.6 - double.machine().now()))
    r.tick()
    fast = r.tick()
    families = expose(r, fast, slow, stats)
    up = {s.labels["gpu"]: s.value for s in families["gpuwait_gpu_up"].samples}
    assert up == {"0": 1.0, "1": 0.0}
    window = {s.labels["gpu"] for s in families["gpuwait_gpu_window_utilization_mean_ratio"].samples}
    assert window == {"0"}
    assert families["gpuwait_gpu_backend_up"].samples[0].value == 1.0


def test_exposition_without_backend(double, rigs):
    r = rig(double, rigs, None)
    families = expose(r, r.tick(), r.slow.read(), None)
    assert list(families) == ["gpuwait_gpu_backend_up"]
    assert families["gpuwait_gpu_backend_up"].samples[0].value == 0.0


def test_gpm_and_processes_can_be_switched_off(double, rigs):
    clock = FakeClock()
    r = rig(double, rigs, HGX_MACHINE, "--collector.gpu.gpm=false", "--collector.gpu.processes=false", clock=clock)
    r.tick()
    clock.set(0.5)
    fast = r.tick().data
    slow = r.slow.read().data
    calls = double.machine().calls
    assert all(g.gpm == {} for g in fast.gpus)
    assert calls["nvmlGpmSampleGet"] == 0 and calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 0
    assert all(g.processes is None and g.owners == () for g in slow.gpus) and slow.owners == {}
