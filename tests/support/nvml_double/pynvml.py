"""A test double of ``pynvml`` (nvidia-ml-py) that describes a whole machine from YAML.

Put this directory first on PYTHONPATH and ``import pynvml`` gets this module. It loads the
REAL pynvml of the installed nvidia-ml-py under another module name and re-exports all of
it: constants, ctypes structs and the NVMLError subclasses are the real ones, so results
carry the real struct fields and errors the real codes. Only the functions gpuwait calls
are replaced; every other ``nvml*`` function raises NotImplementedError, so a call the
double does not model fails loudly instead of pretending. tests/nvml/test_nvml_gateway.py
checks that every replaced function keeps the real signature.

The machine is read from the YAML file named by $GPUWAIT_NVML_DOUBLE (or given to
``configure``). Without one, nvmlInit fails with LIBRARY_NOT_FOUND, as on a host without a
driver. Times in the file are seconds since the double was configured. Keys::

    driver_version: "550.90.07"      cuda_version: 12040
    init_error: {error: DRIVER_NOT_LOADED, until: 3}   # nvmlInit fails until t=3 (or always)
    init_hang: {after: 0, until: 2}                    # nvmlInit does not return until t=2
    driver_gone: {after: 5, until: 9, error: DRIVER_NOT_LOADED}
    count: 8
    defaults: {...}                  # applied to every GPU, then
    gpus: {3: {...}, 5: {...}}       # per-index overrides

Per GPU: name, memory_total, memory_used, gpm (bool), architecture, numa, switch,
host_bridge, pcie {gen, width, max_gen, max_width, gpu_max_gen, tx_rate, rx_rate, replays},
pcie_counters (bool), nvlink {links, rate, down: [..], errors: {crc_flit: n, ...}},
utilization {period, duty, high, low, phase} or a constant or {live: PATH, high, low} (below),
memory_factor, sample_period,
power {idle, max, limit}, clocks_event_reasons [SwPowerCap, ...], processes [{pid,
used_memory, sm}], process_churn {rate, lifetime, first_pid}, xids [{after, code}], lost {after, until}, hang {calls: [...], after,
until}, errors {nvmlFunction: ERROR_NAME}, field_errors {NVML_FI_NAME: ERROR_NAME},
mig {instances: [{gpu_instance, compute_instance, memory_total, memory_used}]}.

A live utilization (``utilization: {live: PATH}``) follows a workload running next to the
double: PATH is a log the workload appends a line to at each change of state,
``<seconds> <value>`` where seconds are on the machine's clock (CLOCK_MONOTONIC, i.e.
``time.monotonic()`` in any process of the host, when the double runs on its own clock) and
value is ``busy`` (= high), ``idle`` (= low) or a fraction 0..1. A line without a time takes
effect when the double first reads it. The log is read again on every call, so sample
buffers, GPM intervals, energy and PCIe counters all integrate the changes exactly where
they happened. Processes listed with a real pid are real processes: the exporter reads
their /proc/<pid> as it would for a CUDA process.
"""

from __future__ import annotations

import bisect
import ctypes
import importlib.metadata
import importlib.util
import os
import sys
import threading
import time
import types
from collections import Counter

import yaml

_REAL_NAME = "_gpuwait_real_pynvml"


def _load_real():
    if _REAL_NAME in sys.modules:
        return sys.modules[_REAL_NAME]
    path = importlib.metadata.distribution("nvidia-ml-py").locate_file("pynvml.py")
    spec = importlib.util.spec_from_file_location(_REAL_NAME, str(path))
    module = importlib.util.module_from_spec(spec)
    # The real module looks itself up in sys.modules while it builds its error classes.
    sys.modules[_REAL_NAME] = module
    spec.loader.exec_module(module)
    return module


real = _load_real()

#: Pure helpers of the real module that never touch the library: kept as they are.
_PURE_HELPERS = {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}


def _unimplemented(name):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"the NVML test double does not implement {name}")

    stub.__name__ = stub.__qualname__ = name
    stub.__module__ = _REAL_NAME
    return stub


for _name in dir(real):
    if _name.startswith("__"):
        continue
    _obj = getattr(real, _name)
    if isinstance(_obj, types.FunctionType) and _name.startswith("nvml") and _name not in _PURE_HELPERS:
        globals()[_name] = _unimplemented(_name)
    else:
        globals()[_name] = _obj
del _name, _obj

MIB = 1024 * 1024


def _error(name: str):
    return real.NVMLError(getattr(real, f"NVML_ERROR_{name}"))


# -- the machine ------------------------------------------------------------------------------
class _Window:
    """[after, until) in machine seconds; until None = for ever."""

    def __init__(self, spec) -> None:
        spec = spec or {}
        self.after = float(spec.get("after", 0.0))
        until = spec.get("until")
        self.until = None if until is None else float(until)

    def active(self, t: float) -> bool:
        return t >= self.after and (self.until is None or t < self.until)


class _Pattern:
    """Square-wave utilization: ``high`` for ``duty`` of each ``period``, ``low`` otherwise."""

    def __init__(self, spec) -> None:
        if not isinstance(spec, dict):
            spec = {"period": 0, "high": float(spec or 0.0), "low": float(spec or 0.0)}
        self.period = float(spec.get("period", 0.0))
        self.duty = float(spec.get("duty", 1.0))
        self.high = float(spec.get("high", 0.95))
        self.low = float(spec.get("low", 0.02))
        self.phase = float(spec.get("phase", 0.0))

    def _high_time(self, x: float) -> float:
        if self.period <= 0:
            return x
        whole, part = divmod(x, self.period)
        on = self.duty * self.period
        return whole * on + min(part, on)

    def integral(self, t: float) -> float:
        """Integral of utilization over [0, t]."""
        high_time = self._high_time(t + self.phase) - self._high_time(self.phase)
        return self.low * t + (self.high - self.low) * high_time

    def at(self, t: float) -> float:
        if self.period <= 0:
            return self.high
        return self.high if (t + self.phase) % self.period < self.duty * self.period else self.low

    def mean(self, a: float, b: float) -> float:
        return self.at(b) if b <= a else (self.integral(b) - self.integral(a)) / (b - a)


class _LiveSignal:
    """Utilization as a step function read from the log a workload appends its state changes
    to; same interface as _Pattern. Before the first change it is ``low``; after the last it
    stays at the last value."""

    def __init__(self, machine: "_Machine", spec: dict) -> None:
        self.machine = machine
        self.path = os.fspath(spec["live"])
        self.high = float(spec.get("high", 0.97))
        self.low = float(spec.get("low", 0.0))
        self.times: list[float] = []  # machine seconds of each change, ascending
        self.values: list[float] = []
        self.cumulative: list[float] = []  # integral over [0, times[i]]
        self._offset = 0
        self._partial = b""
        self._lock = threading.Lock()

    def _value(self, word: str) -> float:
        if word == "busy":
            return self.high
        if word == "idle":
            return self.low
        return min(1.0, max(0.0, float(word)))

    def _refresh(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # a line still being written
        m = self.machine
        for line in lines:
            words = line.decode("ascii", "replace").split()
            if not words:
                continue
            try:
                if len(words) >= 2:
                    t, value = float(words[0]) - m.t0, self._value(words[1])
                else:
                    t, value = m.now(), self._value(words[0])
            except ValueError:
                continue  # not a state line: a workload's log may carry other text
            t = max(t, 0.0, self.times[-1] if self.times else 0.0)
            before = self.integral_known(t)
            self.times.append(t)
            self.values.append(value)
            self.cumulative.append(before)

    def integral_known(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return self.low * t
        return self.cumulative[i] + self.values[i] * (t - self.times[i])

    def integral(self, t: float) -> float:
        """Integral of utilization over [0, t]."""
        with self._lock:
            self._refresh()
            return self.integral_known(max(t, 0.0))

    def at(self, t: float) -> float:
        with self._lock:
            self._refresh()
            i = bisect.bisect_right(self.times, t) - 1
            return self.low if i < 0 else self.values[i]

    def mean(self, a: float, b: float) -> float:
        return self.at(b) if b <= a else (self.integral(b) - self.integral(a)) / (b - a)


class _Gpu:
    def __init__(self, machine: "_Machine", index: int, spec: dict) -> None:
        self.machine = machine
        self.index = index
        self.spec = spec
        self.uuid = spec.get("uuid") or f"GPU-{index:08x}-7a1e-4c2b-9d3f-{0x5eed0000 + index:012x}"
        self.name = spec.get("name", "NVIDIA H100 80GB HBM3")
        self.architecture = getattr(real, f"NVML_DEVICE_ARCH_{spec.get('architecture', 'HOPPER').upper()}")
        self.gpm = bool(spec.get("gpm", True))
        self.memory_total = int(spec.get("memory_total", 85899345920))
        self.memory_used = int(spec.get("memory_used", 40 * 2**30))
        self.bus = int(spec.get("bus", 0x18 + 0x10 * index))
        self.numa = int(spec.get("numa", 0 if index < 4 else 1))
        self.switch = int(spec.get("switch", index // 2))
        self.host_bridge = int(spec.get("host_bridge", index // 4))
        pcie = spec.get("pcie") or {}
        self.pcie = {
            "gen": int(pcie.get("gen", 5)), "width": int(pcie.get("width", 16)),
            "max_gen": int(pcie.get("max_gen", 5)), "max_width": int(pcie.get("max_width", 16)),
            "gpu_max_gen": int(pcie.get("gpu_max_gen", 5)),
            "tx_rate": float(pcie.get("tx_rate", 2e9)), "rx_rate": float(pcie.get("rx_rate", 6e9)),
            "replays": int(pcie.get("replays", 0)),
        }
        self.pcie_counters = bool(spec.get("pcie_counters", True))
        nvlink = spec.get("nvlink") or {}
        self.links = int(nvlink.get("links", 18))
        self.nvlink_rate = float(nvlink.get("rate", 100e9))
        self.nvlink_down = set(nvlink.get("down", ()))
        self.nvlink_errors = dict(nvlink.get("errors") or {})
        utilization = spec.get("utilization", {"period": 2.0, "duty": 0.5})
        if isinstance(utilization, dict) and "live" in utilization:
            self.pattern = _LiveSignal(machine, utilization)
        else:
            self.pattern = _Pattern(utilization)
        self.memory_factor = float(spec.get("memory_factor", 0.4))
        self.sample_period = float(spec.get("sample_period", 1 / 6))
        power = spec.get("power") or {}
        self.power_idle = float(power.get("idle", 90.0))
        self.power_max = float(power.get("max", 690.0))
        self.power_limit = float(power.get("limit", 700.0))
        self.reasons = [getattr(real, f"nvmlClocksEventReason{r}") for r in spec.get("clocks_event_reasons", ())]
        self.processes = list(spec.get("processes") or ())
        churn = spec.get("process_churn")
        self.churn = (float(churn.get("rate", 100)), float(churn.get("lifetime", 0.5)),
                      int(churn.get("first_pid", 100000))) if churn else None
        self.xids = [(float(x["after"]), int(x["code"])) for x in spec.get("xids") or ()]
        self.lost = _Window(spec["lost"]) if spec.get("lost") else None
        hang = spec.get("hang")
        self.hang_calls = set(hang.get("calls", ())) if hang else set()
        self.hang_window = _Window(hang) if hang else None
        self.errors = dict(spec.get("errors") or {})
        self.field_errors = {getattr(real, k): v for k, v in (spec.get("field_errors") or {}).items()}
        self.struct = real.struct_c_nvmlDevice_t()
        mig = spec.get("mig")
        self.mig = []
        if mig:
            for n, inst in enumerate(mig.get("instances") or ()):
                self.mig.append(_Mig(self, n, inst))

    @property
    def mig_enabled(self) -> bool:
        return bool(self.mig)

    def handle(self):
        return real.c_nvmlDevice_t(self.struct)

    def processes_now(self) -> list[dict]:
        """The fixed processes, plus those of the churn alive now: one started every 1/rate
        seconds, each living ``lifetime`` seconds, with pids counting up from first_pid."""
        if self.churn is None:
            return self.processes
        rate, lifetime, first_pid = self.churn
        t = self.machine.now()
        newest = int(t * rate)
        oldest = max(0, int((t - lifetime) * rate) + 1)
        return self.processes + [{"pid": first_pid + n, "used_memory": 2**28, "sm": 0.01} for n in range(oldest, newest + 1)]

    def util_integral(self, t: float) -> float:
        return self.pattern.integral(t)


class _Mig:
    def __init__(self, parent: _Gpu, slot: int, spec: dict) -> None:
        self.parent = parent
        self.slot = slot
        self.gpu_instance = int(spec.get("gpu_instance", slot + 1))
        self.compute_instance = int(spec.get("compute_instance", 0))
        self.memory_total = int(spec.get("memory_total", 10 * 2**30))
        self.memory_used = int(spec.get("memory_used", 2**30))
        self.uuid = f"MIG-{parent.index:08x}-{self.gpu_instance:04x}-{self.compute_instance:04x}-0000-{0x31660000 + slot:012x}"
        self.struct = real.struct_c_nvmlDevice_t()

    def handle(self):
        return real.c_nvmlDevice_t(self.struct)


class _Machine:
    def __init__(self, config: dict, clock=None) -> None:
        self.clock = clock or time.monotonic
        self.t0 = self.clock()
        self.wall0 = time.time()
        self.config = config
        self.initialised = 0
        self.calls: Counter = Counter()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.driver_version = str(config.get("driver_version", "550.90.07"))
        self.cuda_version = int(config.get("cuda_version", 12040))
        init_error = config.get("init_error")
        if isinstance(init_error, str):
            init_error = {"error": init_error}
        self.init_error = init_error
        hang = config.get("init_hang")
        self.init_hang = _Window(hang) if hang else None
        gone = config.get("driver_gone")
        self.driver_gone = _Window(gone) if gone else None
        self.driver_gone_error = (gone or {}).get("error", "DRIVER_NOT_LOADED")
        defaults = dict(config.get("defaults") or {})
        overrides = {int(k): v for k, v in (config.get("gpus") or {}).items()}
        self.gpus = [_Gpu(self, i, {**defaults, **(overrides.get(i) or {})}) for i in range(int(config.get("count", 0)))]
        self.by_address = {}
        for gpu in self.gpus:
            self.by_address[ctypes.addressof(gpu.struct)] = gpu
            for mig in gpu.mig:
                self.by_address[ctypes.addressof(mig.struct)] = mig
        self.gpm_samples: dict[int, tuple] = {}
        self.event_sets: dict[int, dict] = {}
        self._keep = []  # ctypes objects handed out, kept alive

    def now(self) -> float:
        return self.clock() - self.t0

    def wall_us(self, t: float) -> int:
        return int((self.wall0 + t) * 1e6)


_machine: _Machine | None = None


def configure(config=None, clock=None) -> "_Machine":
    """(Re)build the machine from a dict, a YAML path, or None (no driver at all)."""
    global _machine
    if isinstance(config, (str, os.PathLike)):
        with open(config, encoding="utf-8") as f:
            config = yaml.safe_load(f) or {}
    if _machine is not None:
        _machine.release.set()  # let calls hanging in the old machine go
    _machine = None if config is None else _Machine(config, clock)
    return _machine


def machine() -> "_Machine":
    return _machine


configure(os.environ.get("GPUWAIT_NVML_DOUBLE") or None)


# -- plumbing -------------------------------------------------------------------------------
def _m(fn: str) -> _Machine:
    m = _machine
    if m is None or not m.initialised:
        raise _error("UNINITIALIZED")
    m.calls[fn] += 1
    t = m.now()
    if m.driver_gone is not None and m.driver_gone.active(t):
        raise _error(m.driver_gone_error)
    return m


def _resolve(handle, fn: str):
    m = _m(fn)
    try:
        target = m.by_address[ctypes.addressof(handle.contents)]
    except (KeyError, ValueError, AttributeError):
        raise _error("INVALID_ARGUMENT") from None
    gpu = target.parent if isinstance(target, _Mig) else target
    t = m.now()
    if gpu.lost is not None and gpu.lost.active(t):
        raise _error("GPU_IS_LOST")
    if fn in gpu.hang_calls and gpu.hang_window.active(t):
        while not m.release.is_set() and gpu.hang_window.active(m.now()):
            m.release.wait(0.02)
    if fn in gpu.errors:
        raise _error(gpu.errors[fn])
    return target


def _gpu(handle, fn: str) -> _Gpu:
    target = _resolve(handle, fn)
    if isinstance(target, _Mig):
        raise _error("NOT_SUPPORTED")  # a MIG handle for a whole-GPU query
    return target


def _no_mig(gpu: _Gpu) -> None:
    # NVML offers no GPU-wide utilization on a GPU with MIG enabled.
    if gpu.mig_enabled:
        raise _error("NOT_SUPPORTED")


# -- lifecycle and system -----------------------------------------------------------------------
def nvmlInit():
    m = _machine
    if m is None:
        raise _error("LIBRARY_NOT_FOUND")
    with m.lock:
        m.calls["nvmlInit"] += 1
    t = m.now()
    if m.init_hang is not None and m.init_hang.active(t):
        while not m.release.is_set() and m.init_hang.active(m.now()):
            m.release.wait(0.02)
    if m.init_error is not None:
        until = m.init_error.get("until")
        if until is None or t < float(until):
            raise _error(m.init_error["error"])
    if m.driver_gone is not None and m.driver_gone.active(t):
        raise _error(m.driver_gone_error)
    with m.lock:
        m.initialised += 1
    return None


def nvmlShutdown():
    # The library's own reference count: released even when the driver has gone away.
    m = _machine
    if m is None or not m.initialised:
        raise _error("UNINITIALIZED")
    with m.lock:
        m.calls["nvmlShutdown"] += 1
        m.initialised -= 1
    return None


def nvmlSystemGetDriverVersion():
    return _m("nvmlSystemGetDriverVersion").driver_version


def nvmlSystemGetNVMLVersion():
    m = _m("nvmlSystemGetNVMLVersion")
    return f"{m.cuda_version // 1000}.{m.driver_version}"


def nvmlSystemGetCudaDriverVersion_v2():
    return _m("nvmlSystemGetCudaDriverVersion_v2").cuda_version


def nvmlSystemGetCudaDriverVersion():
    return _m("nvmlSystemGetCudaDriverVersion").cuda_version


def nvmlDeviceGetCount():
    return len(_m("nvmlDeviceGetCount").gpus)


def nvmlDeviceGetHandleByIndex(index):
    m = _m("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(m.gpus):
        raise _error("INVALID_ARGUMENT")
    gpu = m.gpus[index]
    if gpu.lost is not None and gpu.lost.active(m.now()):
        raise _error("GPU_IS_LOST")
    return gpu.handle()


def nvmlDeviceGetHandleByUUID(uuid):
    m = _m("nvmlDeviceGetHandleByUUID")
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    for gpu in m.gpus:
        if gpu.uuid == uuid:
            if gpu.lost is not None and gpu.lost.active(m.now()):
                raise _error("GPU_IS_LOST")
            return gpu.handle()
    raise _error("NOT_FOUND")


def nvmlDeviceGetUUID(handle):
    return _resolve(handle, "nvmlDeviceGetUUID").uuid


def nvmlDeviceGetName(handle):
    return _gpu(handle, "nvmlDeviceGetName").name


def nvmlDeviceGetPciInfo_v3(handle):
    gpu = _gpu(handle, "nvmlDeviceGetPciInfo_v3")
    info = real.nvmlPciInfo_t()
    info.domain, info.bus, info.device = 0, gpu.bus, 0
    info.pciDeviceId = 0x233010DE
    info.busIdLegacy = f"0000:{gpu.bus:02X}:00.0"
    info.busId = f"00000000:{gpu.bus:02X}:00.0"
    return info


def nvmlDeviceGetNumaNodeId(handle):
    return _gpu(handle, "nvmlDeviceGetNumaNodeId").numa


def nvmlDeviceGetArchitecture(device):
    return _gpu(device, "nvmlDeviceGetArchitecture").architecture


def nvmlDeviceGetMigMode(device):
    gpu = _gpu(device, "nvmlDeviceGetMigMode")
    mode = real.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else real.NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetPersistenceMode(handle):
    _gpu(handle, "nvmlDeviceGetPersistenceMode")
    return real.NVML_FEATURE_ENABLED


# -- memory, utilization --------------------------------------------------------------------
def nvmlDeviceGetMemoryInfo(handle, version=None):
    target = _resolve(handle, "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo")
    if version:
        if version != real.nvmlMemory_v2:
            raise _error("ARGUMENT_VERSION_MISMATCH")
        memory = real.c_nvmlMemory_v2_t()
        memory.version = version
        memory.reserved = 512 * MIB
    else:
        memory = real.c_nvmlMemory_t()
    memory.total = target.memory_total
    memory.used = target.memory_used
    memory.free = target.memory_total - target.memory_used - (512 * MIB if version else 0)
    return memory


def nvmlDeviceGetUtilizationRates(handle):
    gpu = _gpu(handle, "nvmlDeviceGetUtilizationRates")
    _no_mig(gpu)
    t = gpu.machine.now()
    util = gpu.pattern.mean(max(0.0, t - gpu.sample_period), t)
    rates = real.c_nvmlUtilization_t()
    rates.gpu = round(100 * util)
    rates.memory = round(100 * util * gpu.memory_factor)
    return rates


def nvmlDeviceGetSamples(device, sampling_type, timeStamp):
    gpu = _gpu(device, "nvmlDeviceGetSamples")
    _no_mig(gpu)
    if sampling_type == real.NVML_GPU_UTILIZATION_SAMPLES:
        factor = 1.0
    elif sampling_type == real.NVML_MEMORY_UTILIZATION_SAMPLES:
        factor = gpu.memory_factor
    else:
        raise _error("NOT_SUPPORTED")
    m = gpu.machine
    t = m.now()
    period = gpu.sample_period
    newest = int(t / period)
    samples = []
    # The driver keeps a bounded buffer of recent samples.
    for k in range(max(1, newest - 99), newest + 1):
        stamp = m.wall_us(k * period)
        if stamp <= timeStamp:
            continue
        sample = real.c_nvmlSample_t()
        sample.timeStamp = stamp
        sample.sampleValue.uiVal = round(100 * factor * gpu.pattern.mean((k - 1) * period, k * period))
        samples.append(sample)
    if not samples:
        raise _error("NOT_FOUND")
    return (real.NVML_VALUE_TYPE_UNSIGNED_INT, samples)


# -- GPM --------------------------------------------------------------------------------------
def nvmlGpmQueryDeviceSupport(device):
    gpu = _gpu(device, "nvmlGpmQueryDeviceSupport")
    support = real.c_nvmlGpmSupport_t()
    support.version = real.NVML_GPM_SUPPORT_VERSION
    support.isSupportedDevice = 1 if gpu.gpm else 0
    return support


def nvmlGpmSampleAlloc():
    m = _m("nvmlGpmSampleAlloc")
    struct = real.struct_c_nvmlGpmSample_t()
    m._keep.append(struct)
    return real.c_nvmlGpmSample_t(struct)


def nvmlGpmSampleFree(gpmSample):
    m = _m("nvmlGpmSampleFree")
    m.gpm_samples.pop(ctypes.addressof(gpmSample.contents), None)
    return


def nvmlGpmSampleGet(device, gpmSample):
    gpu = _gpu(device, "nvmlGpmSampleGet")
    if not gpu.gpm:
        raise _error("NOT_SUPPORTED")
    gpu.machine.gpm_samples[ctypes.addressof(gpmSample.contents)] = (gpu, None, gpu.machine.now())
    return gpmSample


def nvmlGpmMigSampleGet(device, gpuInstanceId, gpmSample):
    gpu = _gpu(device, "nvmlGpmMigSampleGet")
    if not gpu.gpm or gpuInstanceId not in {i.gpu_instance for i in gpu.mig}:
        raise _error("NOT_SUPPORTED" if not gpu.gpm else "INVALID_ARGUMENT")
    gpu.machine.gpm_samples[ctypes.addressof(gpmSample.contents)] = (gpu, gpuInstanceId, gpu.machine.now())
    return gpmSample


def nvmlGpmMetricsGet(metricsGet):
    m = _m("nvmlGpmMetricsGet")
    if metricsGet.version != real.NVML_GPM_METRICS_GET_VERSION:
        raise _error("ARGUMENT_VERSION_MISMATCH")
    try:
        gpu1, gi1, t1 = m.gpm_samples[ctypes.addressof(metricsGet.sample1.contents)]
        gpu2, gi2, t2 = m.gpm_samples[ctypes.addressof(metricsGet.sample2.contents)]
    except (KeyError, ValueError):
        raise _error("INVALID_ARGUMENT") from None
    if gpu1 is not gpu2 or gi1 != gi2:
        raise _error("INVALID_ARGUMENT")
    util = gpu1.pattern.mean(t1, t2)
    share = 1.0 / max(1, len(gpu1.mig)) if gi1 is not None else 1.0
    values = {
        real.NVML_GPM_METRIC_SM_UTIL: 100 * util * 0.9,
        real.NVML_GPM_METRIC_SM_OCCUPANCY: 100 * util * 0.5,
        real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 100 * util * 0.6,
        real.NVML_GPM_METRIC_DRAM_BW_UTIL: 100 * util * 0.35,
        real.NVML_GPM_METRIC_PCIE_TX_PER_SEC: gpu1.pcie["tx_rate"] * util * share / MIB,
        real.NVML_GPM_METRIC_PCIE_RX_PER_SEC: gpu1.pcie["rx_rate"] * util * share / MIB,
        real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: gpu1.nvlink_rate * util * share / MIB,
        real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: gpu1.nvlink_rate * util * share / MIB,
    }
    for i in range(metricsGet.numMetrics):
        metric = metricsGet.metrics[i]
        if metric.metricId in values:
            metric.value = values[metric.metricId]
            metric.nvmlReturn = real.NVML_SUCCESS
        else:
            metric.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
    return metricsGet


# -- clocks, power, thermal -------------------------------------------------------------------
def nvmlDeviceGetClockInfo(handle, type):  # noqa: A002 (the real signature)
    gpu = _gpu(handle, "nvmlDeviceGetClockInfo")
    if type == real.NVML_CLOCK_SM:
        return int(345 + (1980 - 345) * min(1.0, 2 * gpu.pattern.at(gpu.machine.now())))
    if type == real.NVML_CLOCK_MEM:
        return 2619
    raise _error("NOT_SUPPORTED")


def nvmlDeviceGetPowerUsage(handle):
    gpu = _gpu(handle, "nvmlDeviceGetPowerUsage")
    util = gpu.pattern.at(gpu.machine.now())
    return int(1000 * (gpu.power_idle + (gpu.power_max - gpu.power_idle) * util))


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return int(1000 * _gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit)


def nvmlDeviceGetTotalEnergyConsumption(handle):
    gpu = _gpu(handle, "nvmlDeviceGetTotalEnergyConsumption")
    t = gpu.machine.now()
    joules = 5e6 + gpu.power_idle * t + (gpu.power_max - gpu.power_idle) * gpu.util_integral(t)
    return int(1000 * joules)


def _temperature(gpu: _Gpu) -> int:
    return int(35 + 40 * gpu.pattern.at(gpu.machine.now()))


def nvmlDeviceGetTemperatureV(handle, sensor, version=real.nvmlTemperature_v1):
    gpu = _gpu(handle, "nvmlDeviceGetTemperatureV")
    if version != real.nvmlTemperature_v1:
        raise _error("ARGUMENT_VERSION_MISMATCH")
    if sensor != real.NVML_TEMPERATURE_GPU:
        raise _error("NOT_SUPPORTED")
    return _temperature(gpu)


def nvmlDeviceGetTemperature(handle, sensor):
    gpu = _gpu(handle, "nvmlDeviceGetTemperature")
    if sensor != real.NVML_TEMPERATURE_GPU:
        raise _error("NOT_SUPPORTED")
    return _temperature(gpu)


def _reasons(gpu: _Gpu) -> int:
    bits = 0
    for bit in gpu.reasons:
        bits |= bit
    if gpu.pattern.at(gpu.machine.now()) < 0.1:
        bits |= real.nvmlClocksEventReasonGpuIdle
    return bits


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _reasons(_gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons"))


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _reasons(_gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons"))


def nvmlDeviceGetViolationStatus(device, perfPolicyType):
    gpu = _gpu(device, "nvmlDeviceGetViolationStatus")
    t = gpu.machine.now()
    if perfPolicyType == real.NVML_PERF_POLICY_POWER:
        active = real.nvmlClocksEventReasonSwPowerCap in gpu.reasons
    elif perfPolicyType == real.NVML_PERF_POLICY_THERMAL:
        active = any(r in gpu.reasons for r in (real.nvmlClocksEventReasonSwThermalSlowdown,
                                                real.nvmlClocksEventReasonHwThermalSlowdown))
    else:
        raise _error("NOT_SUPPORTED")
    violation = real.c_nvmlViolationTime_t()
    violation.referenceTime = gpu.machine.wall_us(t)
    violation.violationTime = int(t * 1e9) if active else 0
    return violation


# -- PCIe ------------------------------------------------------------------------------------
def nvmlDeviceGetPcieThroughput(device, counter):
    gpu = _gpu(device, "nvmlDeviceGetPcieThroughput")
    util = gpu.pattern.at(gpu.machine.now())
    if counter == real.NVML_PCIE_UTIL_TX_BYTES:
        return int(gpu.pcie["tx_rate"] * util / 1024)
    if counter == real.NVML_PCIE_UTIL_RX_BYTES:
        return int(gpu.pcie["rx_rate"] * util / 1024)
    raise _error("INVALID_ARGUMENT")


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration").pcie["gen"]


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth").pcie["width"]


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration").pcie["max_gen"]


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth").pcie["max_width"]


def nvmlDeviceGetGpuMaxPcieLinkGeneration(handle):
    return _gpu(handle, "nvmlDeviceGetGpuMaxPcieLinkGeneration").pcie["gpu_max_gen"]


def nvmlDeviceGetPcieReplayCounter(handle):
    return _gpu(handle, "nvmlDeviceGetPcieReplayCounter").pcie["replays"]


# -- field values and NVLink ----------------------------------------------------------------
def _field(gpu: _Gpu, field_id: int, scope: int):
    """(value type, union member, value) or an error name."""
    t = gpu.machine.now()
    if field_id in gpu.field_errors:
        return gpu.field_errors[field_id]
    if field_id in (real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, real.NVML_FI_DEV_PCIE_COUNT_RX_BYTES):
        if not gpu.pcie_counters:
            return "NOT_SUPPORTED"
        rate = gpu.pcie["tx_rate" if field_id == real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else "rx_rate"]
        return (real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", int(rate * gpu.util_integral(t)))
    if field_id == real.NVML_FI_DEV_NVLINK_LINK_COUNT:
        return "NOT_SUPPORTED" if not gpu.links else (real.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", gpu.links)
    if field_id in (real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
        if not gpu.links:
            return "NOT_SUPPORTED"
        if scope >= gpu.links:
            return "INVALID_ARGUMENT"
        if scope in gpu.nvlink_down:
            return (real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 0)
        kib = gpu.nvlink_rate / gpu.links * gpu.util_integral(t) / 1024
        return (real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", int(kib))
    return "NOT_SUPPORTED"


def nvmlDeviceGetFieldValues(handle, fieldIds):
    gpu = _gpu(handle, "nvmlDeviceGetFieldValues")
    values = (real.c_nvmlFieldValue_t * len(fieldIds))()
    stamp = gpu.machine.wall_us(gpu.machine.now())
    for i, field_id in enumerate(fieldIds):
        try:
            (values[i].fieldId, values[i].scopeId) = field_id
        except TypeError:
            values[i].fieldId = field_id
        values[i].timestamp = stamp
        got = _field(gpu, values[i].fieldId, values[i].scopeId)
        if isinstance(got, str):
            values[i].nvmlReturn = getattr(real, f"NVML_ERROR_{got}")
            continue
        value_type, member, value = got
        values[i].valueType = value_type
        values[i].nvmlReturn = real.NVML_SUCCESS
        setattr(values[i].value, member, value)
    return values


def _link(gpu: _Gpu, link: int) -> None:
    if not gpu.links:
        raise _error("NOT_SUPPORTED")
    if not 0 <= link < gpu.links:
        raise _error("INVALID_ARGUMENT")


def nvmlDeviceGetNvLinkState(device, link):
    gpu = _gpu(device, "nvmlDeviceGetNvLinkState")
    _link(gpu, link)
    return real.NVML_FEATURE_DISABLED if link in gpu.nvlink_down else real.NVML_FEATURE_ENABLED


def nvmlDeviceGetNvLinkErrorCounter(device, link, counter):
    gpu = _gpu(device, "nvmlDeviceGetNvLinkErrorCounter")
    _link(gpu, link)
    names = {real.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit", real.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
             real.NVML_NVLINK_ERROR_DL_REPLAY: "replay", real.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery"}
    if counter not in names:
        raise _error("INVALID_ARGUMENT")
    return int(gpu.nvlink_errors.get(names[counter], 0))


def nvmlDeviceGetTopologyCommonAncestor(device1, device2):
    a = _gpu(device1, "nvmlDeviceGetTopologyCommonAncestor")
    b = _gpu(device2, "nvmlDeviceGetTopologyCommonAncestor")
    if a is b:
        return real.NVML_TOPOLOGY_INTERNAL
    if a.switch == b.switch:
        return real.NVML_TOPOLOGY_SINGLE
    if a.host_bridge == b.host_bridge:
        return real.NVML_TOPOLOGY_HOSTBRIDGE
    if a.numa == b.numa:
        return real.NVML_TOPOLOGY_NODE
    return real.NVML_TOPOLOGY_SYSTEM


# -- events ---------------------------------------------------------------------------------
def nvmlEventSetCreate():
    m = _m("nvmlEventSetCreate")
    struct = real.struct_c_nvmlEventSet_t()
    m._keep.append(struct)
    m.event_sets[ctypes.addressof(struct)] = {"gpus": [], "delivered": set()}
    return real.c_nvmlEventSet_t(struct)


def _event_set(m: _Machine, eventSet) -> dict:
    try:
        return m.event_sets[ctypes.addressof(eventSet.contents)]
    except (KeyError, ValueError):
        raise _error("INVALID_ARGUMENT") from None


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    gpu = _gpu(handle, "nvmlDeviceRegisterEvents")
    if eventTypes & ~real.nvmlEventTypeXidCriticalError:
        raise _error("NOT_SUPPORTED")
    _event_set(gpu.machine, eventSet)["gpus"].append(gpu)
    return None


def nvmlEventSetWait_v2(eventSet, timeoutms):
    m = _m("nvmlEventSetWait_v2")
    state = _event_set(m, eventSet)
    t = m.now()
    for gpu in state["gpus"]:
        if gpu.lost is not None and gpu.lost.active(t):
            raise _error("GPU_IS_LOST")
        for n, (after, code) in enumerate(gpu.xids):
            if after <= t and (gpu.index, n) not in state["delivered"]:
                state["delivered"].add((gpu.index, n))
                data = real.c_nvmlEventData_t()
                data.device = gpu.handle()
                data.eventType = real.nvmlEventTypeXidCriticalError
                data.eventData = code
                data.gpuInstanceId = 0xFFFFFFFF
                data.computeInstanceId = 0xFFFFFFFF
                return data
    if timeoutms:
        m.release.wait(timeoutms / 1000.0)
    raise _error("TIMEOUT")


def nvmlEventSetFree(eventSet):
    m = _m("nvmlEventSetFree")
    m.event_sets.pop(ctypes.addressof(eventSet.contents), None)
    return None


# -- processes ------------------------------------------------------------------------------
def _processes(handle, fn: str):
    gpu = _gpu(handle, fn)
    out = []
    for p in gpu.processes_now():
        info = real.c_nvmlProcessInfo_v2_t()
        info.pid = int(p["pid"])
        used = p.get("used_memory")
        info.usedGpuMemory = real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else int(used)
        info.gpuInstanceId = int(p.get("gpu_instance", 0xFFFFFFFF))
        info.computeInstanceId = int(p.get("compute_instance", 0xFFFFFFFF))
        obj = real.nvmlStructToFriendlyObject(info)
        if obj.usedGpuMemory == real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
            obj.usedGpuMemory = None
        out.append(obj)
    return out


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return _processes(handle, "nvmlDeviceGetComputeRunningProcesses_v3")


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return _processes(handle, "nvmlDeviceGetComputeRunningProcesses_v2")


def nvmlDeviceGetProcessUtilization(handle, timeStamp):
    gpu = _gpu(handle, "nvmlDeviceGetProcessUtilization")
    _no_mig(gpu)
    stamp = gpu.machine.wall_us(gpu.machine.now())
    if not gpu.processes_now() or stamp <= timeStamp:
        raise _error("NOT_FOUND")
    out = []
    for p in gpu.processes_now():
        sample = real.c_nvmlProcessUtilizationSample_t()
        sample.pid = int(p["pid"])
        sample.timeStamp = stamp
        sample.smUtil = round(100 * float(p.get("sm", 0.0)))
        sample.memUtil = round(100 * float(p.get("memory", 0.0)))
        out.append(sample)
    return out


# -- MIG ------------------------------------------------------------------------------------
def nvmlDeviceGetMaxMigDeviceCount(device):
    gpu = _gpu(device, "nvmlDeviceGetMaxMigDeviceCount")
    return 7 if gpu.mig_enabled else 0


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    gpu = _gpu(device, "nvmlDeviceGetMigDeviceHandleByIndex")
    if not gpu.mig_enabled:
        raise _error("INVALID_ARGUMENT")
    if not 0 <= index < 7:
        raise _error("INVALID_ARGUMENT")
    if index >= len(gpu.mig):
        raise _error("NOT_FOUND")
    return gpu.mig[index].handle()


def _mig(device, fn: str) -> _Mig:
    target = _resolve(device, fn)
    if not isinstance(target, _Mig):
        raise _error("INVALID_ARGUMENT")
    return target


def nvmlDeviceGetGpuInstanceId(device):
    return _mig(device, "nvmlDeviceGetGpuInstanceId").gpu_instance


def nvmlDeviceGetComputeInstanceId(device):
    return _mig(device, "nvmlDeviceGetComputeInstanceId").compute_instance

