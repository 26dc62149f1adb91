"""The NVML gateway: error classes, remembered absences, the hang bound, lost GPUs, the
driver going away and coming back, and the fidelity of the test double itself."""

from __future__ import annotations

import inspect
import logging
import re
import threading
import time

import pynvml
import pytest

from gpuwait.nvml import executor, gateway, session
from gpuwait.core.facts import CLOCK_EVENT_REASONS
from gpuwait.nvml.errors import EMPTY, ErrorClass, classify
from gpuwait.nvml.gateway import Gateway
from gpuwait.nvml.values import NA, DriverClock
from nvml_support import FakeClock, load_double, one_gpu

#: Every call to the driver is in the gateway (lifecycle, probes) or the session (queries).
GATEWAY_SOURCE = inspect.getsource(gateway) + inspect.getsource(session)

SKIP = {"NOT_SUPPORTED", "NO_PERMISSION", "NOT_FOUND", "FUNCTION_NOT_FOUND", "NO_DATA", "NOT_READY", "DEPRECATED",
        "INVALID_ARGUMENT", "ARGUMENT_VERSION_MISMATCH"}
DEVICE_GONE = {"GPU_IS_LOST", "RESET_REQUIRED", "GPU_NOT_FOUND", "UNKNOWN"}
DRIVER_GONE = {"DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH", "UNINITIALIZED"}
ALL_ERRORS = sorted(n[len("NVML_ERROR_"):] for n in dir(pynvml) if n.startswith("NVML_ERROR_"))


@pytest.fixture
def double():
    module = load_double()
    yield module
    machine = module.machine()
    if machine is not None:
        machine.release.set()
    module.configure(None)


@pytest.fixture
def clock():
    return FakeClock()


def make_gateway(double, **kw) -> Gateway:
    kw.setdefault("call_timeout", 0.5)
    kw.setdefault("retry_max", 0.4)
    kw.setdefault("first_retry", 0.05)
    return Gateway(nvml=double, **kw)


@pytest.fixture
def gateways():
    made = []
    yield made
    for g in made:
        g.close()


def start(double, clock, config, gateways, **kw) -> Gateway:
    double.configure(config, clock=clock)
    g = make_gateway(double, **kw)
    gateways.append(g)
    assert g.ensure().up
    return g


def by_index(results):
    return {r.index: r for r in results}


# -- classification -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_ERRORS)
def test_every_nvml_error_class_is_classified(name):
    code = getattr(pynvml, f"NVML_ERROR_{name}")
    error = pynvml.nvmlExceptionClass(code)()  # the real subclass, e.g. NVMLError_GpuIsLost
    assert isinstance(error, pynvml.NVMLError) and error.value == code
    expected = (ErrorClass.SKIP if name in SKIP else ErrorClass.DEVICE_GONE if name in DEVICE_GONE
                else ErrorClass.DRIVER_GONE if name in DRIVER_GONE else ErrorClass.FAILED)
    assert classify(error, pynvml) is expected


def test_named_error_classes_exist_in_pynvml():
    # The sets above are the contract; each name must be a real pynvml error class.
    for name in SKIP | DEVICE_GONE | DRIVER_GONE:
        cls_name = "NVMLError_" + "".join(part.capitalize() for part in name.split("_"))
        assert issubclass(getattr(pynvml, cls_name), pynvml.NVMLError), cls_name


def test_library_mismatch_counts_as_missing_function():
    assert classify(pynvml.NVMLLibraryMismatchError("old driver"), pynvml) is ErrorClass.SKIP


def test_clock_event_reason_bits_are_pynvml_s():
    names = {
        "gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake_slowdown": "HwPowerBrakeSlowdown", "display_clock_setting": "DisplayClockSetting",
    }
    for bit, name in CLOCK_EVENT_REASONS:
        assert getattr(pynvml, f"nvmlClocksEventReason{names[name]}") == bit


# -- the double stays faithful ------------------------------------------------------------------
def double_functions(double):
    return {name: fn for name, fn in vars(double).items()
            if name.startswith("nvml") and inspect.isfunction(fn) and fn.__module__ == double.__name__}


def test_double_functions_have_the_real_signatures(double):
    functions = double_functions(double)
    assert len(functions) > 40
    for name, fn in functions.items():
        real = getattr(pynvml, name)
        assert inspect.signature(fn) == inspect.signature(real), name


def test_double_models_every_call_the_gateway_makes(double):
    called = set(re.findall(r"\bnv\.(nvml[A-Za-z0-9_]+)\b", GATEWAY_SOURCE))
    called |= {name for name in re.findall(r'"(nvml[A-Za-z0-9_]+)"', GATEWAY_SOURCE) if hasattr(pynvml, name)}
    called = {name for name in called if inspect.isfunction(getattr(pynvml, name, None))}
    assert "nvmlDeviceGetSamples" in called and "nvmlGpmMetricsGet" in called
    missing = called - set(double_functions(double))
    assert not missing


def test_double_reexports_the_real_types_and_refuses_what_it_does_not_model(double):
    real = double.real
    assert real.__file__ == pynvml.__file__
    for name in ("c_nvmlMemory_t", "c_nvmlUtilization_t", "c_nvmlProcessInfo_t", "c_nvmlFieldValue_t",
                 "c_nvmlGpmMetricsGet_t", "c_nvmlSample_t", "NVMLError", "NVMLError_GpuIsLost",
                 "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_GPM_METRIC_SM_UTIL"):
        assert getattr(double, name) is getattr(real, name)
    assert double.NVML_FI_DEV_PCIE_COUNT_TX_BYTES == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES == 197
    with pytest.raises(NotImplementedError):
        double.nvmlDeviceGetBAR1MemoryInfo(None)


def test_double_results_are_real_structs(double, clock, gateways):
    double.configure(one_gpu(), clock=clock)
    double.nvmlInit()
    handle = double.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(double.nvmlDeviceGetMemoryInfo(handle, double.nvmlMemory_v2), double.real.c_nvmlMemory_v2_t)
    assert isinstance(double.nvmlDeviceGetUtilizationRates(handle), double.real.c_nvmlUtilization_t)
    values = double.nvmlDeviceGetFieldValues(handle, [(double.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3)])
    assert isinstance(values[0], double.real.c_nvmlFieldValue_t) and values[0].scopeId == 3
    with pytest.raises(double.real.NVMLError_NotFound):
        double.nvmlDeviceGetSamples(handle, double.NVML_GPU_UTILIZATION_SAMPLES, 1 << 62)
    double.nvmlShutdown()


# -- remembered absences --------------------------------------------------------------------
def read_power(s):
    s.put("power", s.power_watts())


def test_not_supported_is_remembered_per_gpu_and_call(double, clock, gateways, caplog):
    config = {"count": 2, "gpus": {1: {"errors": {"nvmlDeviceGetPowerUsage": "NOT_SUPPORTED"}}}}
    g = start(double, clock, config, gateways)
    caplog.set_level(logging.DEBUG, logger="gpuwait.nvml")
    for _ in range(4):
        results = by_index(g.run(read_power))
        assert results[0].get("power") > 0
        assert results[1].get("power") is None and results[1].up and not results[1].causes
    # GPU 0 asked every time; GPU 1 asked once, then remembered.
    assert double.machine().calls["nvmlDeviceGetPowerUsage"] == 4 + 1
    counts = g.error_counts()
    assert counts[(1, double.machine().gpus[1].uuid)] == {("nvmlDeviceGetPowerUsage", "NOT_SUPPORTED"): 1}
    infos = [r for r in caplog.records if r.levelno == logging.INFO and "NOT_SUPPORTED" in r.getMessage()]
    assert len(infos) == 1


def test_a_transient_absence_is_asked_again_after_a_while(double, clock, gateways):
    g = start(double, clock, one_gpu(errors={"nvmlDeviceGetPowerUsage": "NO_DATA"}), gateways, retry_max=0.3)
    for _ in range(3):
        assert g.run(read_power)[0].get("power") is None
    assert double.machine().calls["nvmlDeviceGetPowerUsage"] == 1
    time.sleep(0.35)
    g.run(read_power)
    assert double.machine().calls["nvmlDeviceGetPowerUsage"] == 2


def test_other_failures_are_retried_every_read_and_named(double, clock, gateways):
    g = start(double, clock, one_gpu(errors={"nvmlDeviceGetPowerUsage": "TIMEOUT"}), gateways)
    for _ in range(3):
        result = g.run(read_power)[0]
        assert result.get("power") is None and result.up
        assert result.causes == ("gpu0:nvmlDeviceGetPowerUsage:TIMEOUT",)
    assert double.machine().calls["nvmlDeviceGetPowerUsage"] == 3


def test_empty_sample_buffer_is_not_an_absence(double, clock, gateways):
    g = start(double, clock, one_gpu(), gateways)

    def samples(s):
        s.put("samples", s.utilization_samples("gpu"))

    assert g.run(samples)[0].get("samples") == []  # no sample period elapsed yet: NOT_FOUND
    clock.set(1.0)
    got = g.run(samples)[0].get("samples")
    assert len(got) == 6  # 1 s of 1/6 s samples
    assert g.run(samples)[0].get("samples") == []  # nothing newer than the last one
    clock.set(1.5)
    assert len(g.run(samples)[0].get("samples")) == 3
    assert double.machine().calls["nvmlDeviceGetSamples"] == 4


def test_sample_times_are_monotonic_and_recent(double, clock, gateways):
    g = start(double, clock, one_gpu(utilization={"period": 1.0, "duty": 0.5, "high": 0.8, "low": 0.0}), gateways)
    clock.set(2.0)
    before = time.monotonic()
    got = g.run(lambda s: s.put("samples", s.utilization_samples("gpu")))[0].get("samples")
    times = [t for t, _ in got]
    assert times == sorted(times)
    assert all(t <= time.monotonic() for t in times)
    # The machine's wall clock started when it was configured; the newest sample is at most
    # a few seconds old in the exporter's time base.
    assert before - 5 < times[-1] <= time.monotonic()
    values = [v for _, v in got]
    assert set(values) == {0.8, 0.0}


# -- the hang bound -------------------------------------------------------------------------
def read_three(s):
    s.put("memory", s.memory())
    s.put("power", s.power_watts())
    s.put("temperature", s.temperature_celsius())


def test_a_hanging_call_is_bounded_and_other_gpus_keep_answering(double, clock, gateways):
    config = {"count": 3, "gpus": {1: {"hang": {"calls": ["nvmlDeviceGetPowerUsage"]}}}}
    g = start(double, clock, config, gateways, call_timeout=0.3, retry_max=30.0)
    started = time.monotonic()
    results = by_index(g.run(read_three))
    elapsed = time.monotonic() - started
    assert elapsed < 0.3 + 0.2
    for i in (0, 2):
        assert results[i].get("power") > 0 and results[i].get("temperature") > 0 and not results[i].causes
    hung = results[1]
    assert hung.up
    assert hung.get("memory").total > 0  # read before the hang: kept
    assert hung.get("power") is None and hung.get("temperature") is None
    assert hung.causes == ("gpu1:hung:nvmlDeviceGetPowerUsage",)
    # The next read does not wait again: the call is quarantined, the GPU's other calls answer.
    started = time.monotonic()
    results = by_index(g.run(read_three))
    assert time.monotonic() - started < 0.2
    assert results[1].get("temperature") > 0 and results[1].get("power") is None
    assert results[1].causes == ("gpu1:hung:nvmlDeviceGetPowerUsage",)
    assert results[0].get("power") > 0
    assert double.machine().calls["nvmlDeviceGetPowerUsage"] == 2 + 2 + 1
    uuid = double.machine().gpus[1].uuid
    assert g.error_counts()[(1, uuid)] == {("nvmlDeviceGetPowerUsage", "CALL_TIMEOUT"): 1}


def test_a_gpu_hanging_on_everything_stops_taking_jobs(double, clock, gateways):
    hang = {"calls": ["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperatureV"]}
    config = {"count": 2, "gpus": {0: {"hang": hang}}}
    g = start(double, clock, config, gateways, call_timeout=0.2, retry_max=30.0, max_stuck_calls=2)
    for _ in range(2):
        assert by_index(g.run(read_three))[0].up
    started = time.monotonic()
    results = by_index(g.run(read_three))
    assert time.monotonic() - started < 0.1  # nothing to wait for: the GPU takes no job
    assert not results[0].up and results[0].causes == ("gpu0:unresponsive",)
    assert results[1].up and results[1].get("power") > 0
    double.machine().release.set()  # the stuck calls return: the GPU takes jobs again
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not by_index(g.run(read_three))[0].up:
        time.sleep(0.02)
    assert by_index(g.run(read_three))[0].up


def test_a_job_queued_behind_a_hung_one_runs_once_that_one_is_abandoned(double, clock, gateways):
    config = one_gpu(hang={"calls": ["nvmlDeviceGetPowerUsage"]})
    g = start(double, clock, config, gateways, call_timeout=0.3, retry_max=30.0)
    slow = threading.Thread(target=g.run, args=(read_power,))
    slow.start()
    time.sleep(0.05)
    result = g.run(lambda s: s.put("temperature", s.temperature_celsius()), timeout=1.0)[0]
    slow.join()
    assert result.get("temperature") > 0 and result.up


def test_a_hang_in_one_lane_does_not_hold_up_the_other(double, clock, gateways):
    g = start(double, clock, one_gpu(hang={"calls": ["nvmlDeviceGetPowerUsage"]}), gateways,
              call_timeout=0.5, retry_max=30.0)
    slow = threading.Thread(target=g.run, args=(read_power,), kwargs={"lane": "slow"})
    slow.start()
    time.sleep(0.05)
    started = time.monotonic()
    result = g.run(lambda s: s.put("temperature", s.temperature_celsius()), lane="fast")[0]
    assert time.monotonic() - started < 0.1
    assert result.get("temperature") > 0
    slow.join()


# -- lost GPUs and the driver going away ---------------------------------------------------------
def read_memory(s):
    s.put("memory", s.memory())


def test_a_lost_gpu_goes_down_alone_and_is_picked_up_again(double, clock, gateways, caplog):
    config = {"count": 3, "gpus": {1: {"lost": {"after": 1.0, "until": 3.0}}}}
    g = start(double, clock, config, gateways)
    assert all(r.up for r in g.run(read_memory))
    clock.set(1.5)
    caplog.set_level(logging.INFO, logger="gpuwait.nvml")
    g.run(read_memory)
    results = by_index(g.run(read_memory))
    assert not results[1].up and results[1].values == {}
    assert results[1].causes == ("gpu1:lost:GPU_IS_LOST",)
    assert results[0].up and results[2].up and results[0].get("memory").total > 0
    assert [a for _, _, a in g.devices()] == [True, False, True]
    assert sum("lost" in r.getMessage() for r in caplog.records) == 1
    # Probed with backoff while still lost: not on every read.
    probes_before = double.machine().calls["nvmlDeviceGetHandleByUUID"]
    for _ in range(5):
        g.run(read_memory)
    assert double.machine().calls["nvmlDeviceGetHandleByUUID"] - probes_before <= 2
    clock.set(3.5)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not by_index(g.run(read_memory))[1].up:
        time.sleep(0.02)
    results = by_index(g.run(read_memory))
    assert results[1].up and results[1].get("memory").total > 0
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_a_driver_that_goes_away_takes_the_backend_down_and_comes_back(double, clock, gateways, caplog):
    config = {"count": 2, "driver_gone": {"after": 1.0, "until": 2.0}}
    g = start(double, clock, config, gateways)
    clock.set(1.5)
    caplog.set_level(logging.DEBUG, logger="gpuwait.nvml")
    results = g.run(read_memory)
    assert g.status.up is False and "DRIVER_NOT_LOADED" in g.status.reason
    assert [r.up for r in g.run(read_memory)] == [False, False]  # known GPUs stay listed, down
    inits = double.machine().calls["nvmlInit"]
    for _ in range(10):
        g.ensure()
        time.sleep(0.02)
    retries = double.machine().calls["nvmlInit"] - inits
    assert 1 <= retries <= 5  # with backoff, not on every read
    clock.set(2.5)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not g.ensure().up:
        time.sleep(0.02)
    assert g.status.up
    assert all(r.up for r in g.run(read_memory))
    assert double.machine().initialised == 1  # shut down before initialising again
    assert len(results) == 2


def test_no_library_logs_one_line_and_retries_with_backoff(double, gateways, caplog):
    double.configure(None)
    g = make_gateway(double)
    gateways.append(g)
    caplog.set_level(logging.DEBUG, logger="gpuwait.nvml")
    for _ in range(20):
        status = g.ensure()
        assert g.run(read_memory) == []
        time.sleep(0.02)
    assert not status.up and "libnvidia-ml.so.1" in status.reason
    warnings = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(warnings) == 1 and "no GPU backend" in warnings[0].getMessage()
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) >= 2  # it did retry


def test_a_driver_loaded_later_is_picked_up(double, clock, gateways, caplog):
    double.configure({"count": 2, "init_error": {"error": "DRIVER_NOT_LOADED", "until": 1.0}}, clock=clock)
    g = make_gateway(double)
    gateways.append(g)
    caplog.set_level(logging.INFO, logger="gpuwait.nvml")
    assert not g.ensure().up and "driver not loaded" in g.status.reason
    clock.set(1.5)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not g.ensure().up:
        time.sleep(0.02)
    assert g.status.up and len(g.run(read_memory)) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert sum("no GPU backend" in m for m in messages) == 1 and any("NVML ready" in m for m in messages)


def test_a_hanging_nvml_init_does_not_hold_up_reads(double, clock, gateways):
    double.configure({"count": 1, "init_hang": {"after": 0, "until": 1.0}}, clock=clock)
    g = make_gateway(double, call_timeout=0.2)
    gateways.append(g)
    started = time.monotonic()
    assert not g.ensure().up
    assert time.monotonic() - started < 0.4
    started = time.monotonic()
    for _ in range(5):
        assert g.run(read_memory) == []
    assert time.monotonic() - started < 0.1
    clock.set(1.5)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not g.ensure().up:
        time.sleep(0.02)
    assert g.status.up


# -- queries --------------------------------------------------------------------------------
def test_gpm_metrics_over_the_interval_and_its_absence_on_older_gpus(double, clock, gateways, caplog):
    config = {"count": 2, "gpus": {1: {"gpm": False, "architecture": "ampere", "name": "NVIDIA A100-SXM4-80GB"}},
              "defaults": {"utilization": 0.5}}
    caplog.set_level(logging.INFO, logger="gpuwait.nvml")
    g = start(double, clock, config, gateways)

    def gpm(s):
        s.put("gpm", s.gpm("fast"))

    first = by_index(g.run(gpm))
    assert first[0].get("gpm") == {} and first[1].get("gpm") is None
    clock.set(0.1)
    second = by_index(g.run(gpm))
    metrics = second[0].get("gpm")
    assert metrics["sm_active"] == pytest.approx(0.45)
    assert metrics["dram_active"] == pytest.approx(0.175)
    assert metrics["pcie_rx_bytes_per_second"] == pytest.approx(0.5 * 6e9, rel=1e-6)
    assert second[1].get("gpm") is None
    assert sum("offers no GPM" in r.getMessage() for r in caplog.records) == 1


def test_pcie_field_errors_are_per_field(double, clock, gateways):
    config = one_gpu(field_errors={"NVML_FI_DEV_PCIE_COUNT_TX_BYTES": "NOT_SUPPORTED"})
    g = start(double, clock, config, gateways)
    clock.set(1.0)
    for _ in range(2):
        tx, rx = g.run(lambda s: s.put("pcie", s.pcie_bytes()))[0].get("pcie")
        assert tx is None and rx > 0
    uuid = double.machine().gpus[0].uuid
    assert g.error_counts()[(0, uuid)] == {("nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_COUNT_TX_BYTES)", "NOT_SUPPORTED"): 1}


def test_memory_falls_back_to_the_unversioned_call(double, clock, gateways):
    g = start(double, clock, one_gpu(errors={"nvmlDeviceGetMemoryInfo_v2": "FUNCTION_NOT_FOUND"}), gateways)
    memory = g.run(read_memory)[0].get("memory")
    assert memory.total > 0 and memory.reserved is None


def test_clock_reasons_fall_back_to_the_older_name(double, clock, gateways):
    config = one_gpu(errors={"nvmlDeviceGetCurrentClocksEventReasons": "FUNCTION_NOT_FOUND"},
                     clocks_event_reasons=["SwPowerCap"])
    g = start(double, clock, config, gateways)
    reasons = g.run(lambda s: s.put("r", s.clocks_event_reasons()))[0].get("r")
    assert reasons & pynvml.nvmlClocksEventReasonSwPowerCap


def test_xid_events_are_counted_once(double, clock, gateways):
    g = start(double, clock, one_gpu(xids=[{"after": 1.0, "code": 79}, {"after": 2.0, "code": 48}]), gateways)

    def xids(s):
        s.put("xids", s.xid_events())

    assert g.run(xids)[0].get("xids") == []
    clock.set(2.5)
    assert g.run(xids)[0].get("xids") == [79, 48]
    assert g.run(xids)[0].get("xids") == []


def test_processes_and_their_sm_share(double, clock, gateways):
    procs = [{"pid": 4242, "used_memory": 2**30, "sm": 0.6}, {"pid": 4250, "used_memory": None, "sm": 0.1}]
    g = start(double, clock, one_gpu(processes=procs), gateways)
    clock.set(1.0)

    def read(s):
        s.put("procs", s.processes())
        s.put("sm", s.process_utilization())

    result = g.run(read)[0]
    assert [(p.pid, p.used_memory_bytes) for p in result.get("procs")] == [(4242, 2**30), (4250, None)]
    assert result.get("sm") == {4242: 0.6, 4250: 0.1}
    assert g.run(read)[0].get("sm") == {}  # nothing newer since the last call


def test_mig_instances_and_what_mig_takes_away(double, clock, gateways):
    mig = {"instances": [{"gpu_instance": 1, "compute_instance": 0, "memory_total": 2**34, "memory_used": 2**30},
                         {"gpu_instance": 2, "compute_instance": 0}]}
    g = start(double, clock, one_gpu(mig=mig), gateways)

    def read(s):
        s.put("info", s.info())
        s.put("mig", s.mig_instances())
        s.put("util", s.utilization())
        s.put("gpm1", s.gpm("mig1", gpu_instance=1))

    result = g.run(read)[0]
    assert result.get("info").mig_mode is True
    instances = result.get("mig")
    assert [(i.gpu_instance, i.compute_instance) for i in instances] == [(1, 0), (2, 0)]
    assert instances[0].memory.total == 2**34 and instances[0].uuid.startswith("MIG-")
    assert result.get("util") is None
    clock.set(0.5)
    assert g.run(read)[0].get("gpm1")["sm_active"] > 0


def test_peer_topology(double, clock, gateways):
    config = {"count": 4, "defaults": {}, "gpus": {0: {"switch": 0, "numa": 0, "host_bridge": 0},
                                                   1: {"switch": 0, "numa": 0, "host_bridge": 0},
                                                   2: {"switch": 1, "numa": 0, "host_bridge": 1},
                                                   3: {"switch": 2, "numa": 1, "host_bridge": 2}}}
    g = start(double, clock, config, gateways)
    results = by_index(g.run(lambda s: s.put("peers", s.peer_relations())))
    uuid = [gpu.uuid for gpu in double.machine().gpus]
    assert results[0].get("peers") == {uuid[1]: "PIX", uuid[2]: "NODE", uuid[3]: "SYS"}


def test_pci_bus_id_is_written_the_sysfs_way(double, clock, gateways):
    g = start(double, clock, one_gpu(bus=0x9A), gateways)
    assert g.run(lambda s: s.put("info", s.info()))[0].get("info").pci_bus_id == "0000:9a:00.0"


# -- pieces ---------------------------------------------------------------------------------
def test_driver_clock_recognises_wall_and_boot_time_and_anchors_the_rest():
    clock = DriverClock()
    mono, wall, boot = 1000.0, 1.7e9, 5000.0
    assert clock.to_monotonic([int((wall - 0.5) * 1e6)], mono, wall, boot) == [pytest.approx(999.5)]
    assert clock.to_monotonic([int((boot - 0.25) * 1e6)], mono, wall, boot) == [pytest.approx(999.75)]
    odd = DriverClock()
    first = odd.to_monotonic([7_000_000, 7_500_000], mono, wall, boot)
    assert first == [pytest.approx(999.5), pytest.approx(1000.0)]
    later = odd.to_monotonic([8_000_000], mono + 0.5, wall + 0.5, boot + 0.5)
    assert later == [pytest.approx(1000.5)]  # the same anchor: spacing kept across batches
    assert clock.to_monotonic([int((wall + 3) * 1e6)], mono, wall, boot) == [mono]  # never in the future


def test_partial_results_ignore_late_writes():
    out = executor.Partial()
    out["a"] = 1
    assert out.freeze() == {"a": 1}
    out["b"] = 2
    assert out.freeze() == {"a": 1}


def test_executor_cancels_a_job_that_never_started_and_abandons_a_running_one():
    release = threading.Event()
    ex = executor.DeviceExecutor("t", max_stuck=2)
    stuck = ex.submit(lambda ticket, out: release.wait(5))
    queued = ex.submit(lambda ticket, out: out.__setitem__("x", 1))
    time.sleep(0.05)
    # Settled in this order the queued job has not started; the other way round the worker
    # that replaces the abandoned one would pick it up at once.
    outcome = executor.wait_all([(ex, queued), (ex, stuck)], time.monotonic() + 0.05)
    assert outcome[id(stuck)] == "abandoned" and outcome[id(queued)] == "cancelled"
    assert stuck.stuck_in is None and queued.out.freeze() == {}
    assert ex.stuck == 1
    fresh = ex.submit(lambda ticket, out: out.__setitem__("y", 2))
    assert executor.wait_all([(ex, fresh)], time.monotonic() + 1)[id(fresh)] == "done"
    assert fresh.out.freeze() == {"y": 2}
    release.set()
    deadline = time.monotonic() + 1
    while ex.stuck and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ex.stuck == 0
    ex.close()


def test_empty_marker_is_not_na():
    assert EMPTY is not NA


def test_waiting_for_jobs_ends_when_the_last_one_does_not_at_the_deadline():
    executors = [executor.DeviceExecutor(f"t{i}") for i in range(4)]
    try:
        for _ in range(200):
            # Jobs finish before, while and after the waiting side counts them.
            tickets = [(ex, ex.submit(lambda ticket, out, i=i: out.__setitem__("i", i))) for i, ex in enumerate(executors)]
            started = time.monotonic()
            outcome = executor.wait_all(tickets, started + 30)
            assert time.monotonic() - started < 10
            assert [outcome[id(t)] for _, t in tickets] == ["done"] * 4
            assert [t.out.freeze() for _, t in tickets] == [{"i": i} for i in range(4)]
        slow = [(ex, ex.submit(lambda ticket, out, d=d: time.sleep(d))) for ex, d in zip(executors, (0.0, 0.05, 0.1, 0.2))]
        started = time.monotonic()
        outcome = executor.wait_all(slow, started + 30)
        assert 0.2 <= time.monotonic() - started < 10
        assert set(outcome.values()) == {"done"}
        done_before = [(executors[0], executors[0].submit(lambda ticket, out: None))]
        time.sleep(0.05)
        assert executor.wait_all(done_before, time.monotonic() + 30) == {id(done_before[0][1]): "done"}
    finally:
        for ex in executors:
            ex.close()
