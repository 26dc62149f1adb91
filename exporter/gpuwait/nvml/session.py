"""What a job sees of one GPU: a DeviceSession, whose queries return plain values (base
units, ``nvml.values``) or NA, and the per-GPU bookkeeping the gateway keeps for it.

Every query goes through ``DeviceSession._call``: skipped and quarantined calls are not
made, each call is named for the hang bound, and its errors are classified
(``nvml.errors``) and reported back to the gateway that owns the GPU.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwait.nvml.errors import EMPTY, Abandoned, ErrorClass, call_name
from gpuwait.nvml.executor import DeviceExecutor, Partial, Ticket
from gpuwait.nvml.values import NA, DeviceInfo, DriverClock, GpuProcess, Memory, MigInstance, NvLink, PcieLink

log = logging.getLogger("gpuwait.nvml")

MIB = 1024.0 * 1024.0
KIB = 1024.0

_ARCHITECTURES = ("KEPLER", "MAXWELL", "PASCAL", "VOLTA", "TURING", "AMPERE", "ADA", "HOPPER", "BLACKWELL", "RUBIN")
_TOPOLOGY = (("INTERNAL", "BOARD"), ("SINGLE", "PIX"), ("MULTIPLE", "PXB"), ("HOSTBRIDGE", "PHB"),
             ("NODE", "NODE"), ("SYSTEM", "SYS"))
#: GPM metric -> (name in gpuwait, scale to base units)
_GPM_METRICS = (
    ("SM_UTIL", "sm_active", 0.01),
    ("SM_OCCUPANCY", "sm_occupancy", 0.01),
    ("ANY_TENSOR_UTIL", "tensor_active", 0.01),
    ("DRAM_BW_UTIL", "dram_active", 0.01),
    ("PCIE_TX_PER_SEC", "pcie_tx_bytes_per_second", MIB),
    ("PCIE_RX_PER_SEC", "pcie_rx_bytes_per_second", MIB),
    ("NVLINK_TOTAL_TX_PER_SEC", "nvlink_tx_bytes_per_second", MIB),
    ("NVLINK_TOTAL_RX_PER_SEC", "nvlink_rx_bytes_per_second", MIB),
)
#: (metric, its skip key, its NVML constant, name in gpuwait, scale) of every GPM metric
_GPM_WANTED = tuple((metric, f"nvmlGpmMetricsGet({metric})", f"NVML_GPM_METRIC_{metric}", name, scale)
                    for metric, name, scale in _GPM_METRICS)
#: pynvml's structures (``_PrintableStructure``) pass every attribute read and write through
#: Python-level hooks that only convert str and bytes. The numeric fields read at every fast
#: tick of every GPU (samples, field values, GPM metrics) go through the generic accessors the
#: hooks end in: the same ctypes fields, a third of the cost.
_get = object.__getattribute__
_set = object.__setattr__
_NVLINK_ERRORS = (("DL_CRC_FLIT", "crc_flit"), ("DL_CRC_DATA", "crc_data"), ("DL_REPLAY", "replay"), ("DL_RECOVERY", "recovery"))
_MAX_EVENTS_PER_READ = 64
_NOT_A_MIG_ID = 0xFFFFFFFF


def _boottime() -> float | None:
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else None


@dataclass
class _Gpm:
    previous: Any = None
    spare: Any = None


@dataclass(eq=False)
class DeviceState:
    """The gateway's bookkeeping for one GPU (guarded by the gateway's lock where shared)."""

    index: int
    uuid: str
    handle: Any
    #: lane name -> worker queue (created on first use, under the gateway's lock)
    executors: dict[str, DeviceExecutor] = field(default_factory=dict)
    lost: str | None = None
    next_probe: float = 0.0
    probe_backoff: float = 0.0
    #: call key -> (error name, time after which to ask again or None for never)
    skips: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    #: call key -> (time after which to try again, the wait that led there)
    quarantine: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: (call, error name) -> count, for gpuwait_gpu_nvml_errors_total
    error_counts: Counter = field(default_factory=Counter)
    # -- state of the current handle; reset when the handle is re-acquired -----------------
    info: DeviceInfo | None = None
    sample_ts: dict[str, int] = field(default_factory=dict)
    clocks: dict[str, DriverClock] = field(default_factory=dict)
    gpm: dict[str, _Gpm] = field(default_factory=dict)
    event_set: Any = None
    process_ts: int = 0
    peers: dict[str, str] = field(default_factory=dict)

    def reset_handle_state(self) -> list[Any]:
        """Forget what belongs to the old handle; returns driver resources to free."""
        resources = [s for g in self.gpm.values() for s in (g.previous, g.spare) if s is not None]
        if self.event_set is not None:
            resources.append(("event_set", self.event_set))
        self.info = None
        self.sample_ts = {}
        self.clocks = {}
        self.gpm = {}
        self.event_set = None
        self.process_ts = 0
        self.peers = {}
        return resources


class DeviceSession:
    """What a job sees of one GPU: queries returning plain values or NA.

    Every query goes through ``_call``, which applies what the gateway remembers about this
    GPU (skipped and quarantined calls), names the call for the hang bound, and classifies
    the errors.
    """

    def __init__(self, gateway: Any, device: DeviceState, ticket: Ticket, out: Partial, generation: int) -> None:
        # gateway: the Gateway that owns the GPU (not imported here: it imports this module)
        self.gw = gateway
        self.nv = gateway.nv
        self.device = device
        self.index = device.index
        self.uuid = device.uuid
        self.ticket = ticket
        self.out = out
        self.generation = generation

    def put(self, name: str, value: Any) -> None:
        self.out[name] = value

    def cause(self, text: str) -> None:
        self.out[("cause", f"gpu{self.index}:{text}")] = True

    # -- the one path to the driver -----------------------------------------------------------
    def _call(self, key: str, fn: Callable, *args, empty_on: Sequence[int] = ()) -> Any:
        ticket, device, gw = self.ticket, self.device, self.gw
        if ticket.abandoned:
            raise Abandoned
        if device.lost is not None or gw._generation != self.generation or not gw._status.up:
            return NA
        now = time.monotonic()
        skip = device.skips.get(key)
        if skip is not None:
            if skip[1] is None or now < skip[1]:
                return NA
        hung = device.quarantine.get(key)
        if hung is not None and now < hung[0]:
            self.cause(f"hung:{call_name(key)}")
            return NA
        ticket.current = key
        try:
            value = fn(*args)
        except self.nv.NVMLError as e:
            if ticket.abandoned:
                raise Abandoned from None
            return self._failed(key, e.value, empty_on)
        except self.nv.NVMLLibraryMismatchError:
            if ticket.abandoned:
                raise Abandoned from None
            return self._failed(key, self.nv.NVML_ERROR_FUNCTION_NOT_FOUND, ())
        finally:
            ticket.current = None
        if ticket.abandoned:
            raise Abandoned
        if skip is not None or hung is not None:
            with gw._lock:
                device.skips.pop(key, None)
                device.quarantine.pop(key, None)
        return value

    def _failed(self, key: str, code: int, empty_on: Sequence[int]) -> Any:
        gw, device = self.gw, self.device
        if code in empty_on:
            return EMPTY
        if gw._generation != self.generation or not gw._status.up:
            return NA  # the library was re-initialised under this call: not the GPU's fault
        kind = gw.errors.classify(code)
        name = gw.errors.name(code)
        call = call_name(key)
        with gw._lock:
            device.error_counts[(call, name)] += 1
        if kind is ErrorClass.SKIP:
            gw._skip(device, key, code)
        elif kind is ErrorClass.DEVICE_GONE:
            gw._device_lost(device, name, call, self.generation)
        elif kind is ErrorClass.DRIVER_GONE:
            gw._driver_lost(name, call, self.generation)
        else:
            self.cause(f"{call}:{name}")
        return NA

    def _first(self, *attempts: tuple[str, Callable, tuple]) -> Any:
        """The first of several equivalent calls (newest API first) that answers."""
        for key, fn, args in attempts:
            value = self._call(key, fn, *args)
            if value is not NA:
                return value
            if self.device.lost is not None or key not in self.device.skips:
                return NA  # a failure, not an absence: the older call would not do better
        return NA

    @property
    def handle(self):
        return self.device.handle

    # -- identity and configuration ----------------------------------------------------------
    def static_info(self) -> DeviceInfo | Any:
        """What does not change while the handle lives, read once per handle."""
        nv, h, device = self.nv, self.handle, self.device
        cached = device.info
        if cached is None:
            name = self._call("nvmlDeviceGetName", nv.nvmlDeviceGetName, h)
            pci = self._call("nvmlDeviceGetPciInfo_v3", nv.nvmlDeviceGetPciInfo_v3, h)
            numa = self._call("nvmlDeviceGetNumaNodeId", nv.nvmlDeviceGetNumaNodeId, h)
            arch = self._call("nvmlDeviceGetArchitecture", nv.nvmlDeviceGetArchitecture, h)
            support = self._call("nvmlGpmQueryDeviceSupport", nv.nvmlGpmQueryDeviceSupport, h)
            if device.lost is not None or (name is NA and "nvmlDeviceGetName" not in device.skips):
                return NA  # a failed read is not cached: the next read tries again
            cached = DeviceInfo(
                name=name if name is not NA else "",
                pci_bus_id=_pci_bus_id(pci) if pci is not NA else "",
                numa_node=numa if numa is not NA and numa >= 0 else None,
                gpm_supported=support is not NA and bool(support.isSupportedDevice),
                nvlink_links=self._nvlink_links(),
                architecture=_architecture(nv, arch),
            )
            device.info = cached
            if not cached.gpm_supported:
                self._say_no_gpm(cached)
        return cached

    def info(self) -> DeviceInfo | Any:
        """``static_info`` plus MIG and persistence mode, which an admin can change any time."""
        nv, h = self.nv, self.handle
        cached = self.static_info()
        if cached is NA:
            return NA
        mig = self._call("nvmlDeviceGetMigMode", nv.nvmlDeviceGetMigMode, h)
        persistence = self._call("nvmlDeviceGetPersistenceMode", nv.nvmlDeviceGetPersistenceMode, h)
        return DeviceInfo(
            cached.name, cached.pci_bus_id, cached.numa_node,
            mig_mode=None if mig is NA else mig[0] == nv.NVML_DEVICE_MIG_ENABLE,
            persistence_mode=None if persistence is NA else persistence == nv.NVML_FEATURE_ENABLED,
            gpm_supported=cached.gpm_supported, nvlink_links=cached.nvlink_links,
            architecture=cached.architecture,
        )

    def _say_no_gpm(self, info: DeviceInfo) -> None:
        model = info.name or "unknown model"
        with self.gw._lock:
            first = model not in self.gw._logged_no_gpm
            self.gw._logged_no_gpm.add(model)
        if first:
            log.info("%s (GPU %d) offers no GPM (GPU performance monitoring, Hopper and newer): SM activity, "
                     "occupancy, tensor and DRAM bandwidth series are left out; NVML's utilization, "
                     "memory and PCIe/NVLink counters are still published", model, self.index)

    def _nvlink_links(self) -> tuple[int, ...]:
        nv = self.nv
        count = self._fields({"links": ("NVML_FI_DEV_NVLINK_LINK_COUNT", 0)}).get("links", NA)
        candidates = range(int(count)) if count is not NA else range(nv.NVML_NVLINK_MAX_LINKS)
        links = []
        for link in candidates:
            state = self._call(f"nvmlDeviceGetNvLinkState:{link}", nv.nvmlDeviceGetNvLinkState, self.handle, link)
            if state is NA:
                if count is NA:
                    break  # probing: the first link the GPU rejects ends the list
                continue
            links.append(link)
        return tuple(links)

    # -- utilization -------------------------------------------------------------------------
    def utilization_samples(self, kind: str) -> list[tuple[float, float]] | Any:
        """New samples of the driver's utilization buffer since the last call, as
        (monotonic time, ratio). ``kind`` is "gpu" or "memory". [] when nothing is new."""
        nv, device = self.nv, self.device
        sampling_name = "NVML_GPU_UTILIZATION_SAMPLES" if kind == "gpu" else "NVML_MEMORY_UTILIZATION_SAMPLES"
        sampling = getattr(nv, sampling_name)
        last = device.sample_ts.get(kind, 0)
        # The driver answers NOT_FOUND when its buffer holds nothing newer than ``last``.
        got = self._call(f"nvmlDeviceGetSamples({sampling_name})", nv.nvmlDeviceGetSamples, self.handle, sampling, last,
                         empty_on=(nv.NVML_ERROR_NOT_FOUND,))
        if got is NA or got is EMPTY:
            return got if got is NA else []
        value_type, samples = got
        stamps, values = [], []
        members = _value_members(nv)
        for sample in samples:
            stamp = int(_get(sample, "timeStamp"))
            if stamp <= last:
                continue
            value = _union_value(members, _get(sample, "sampleValue"), value_type)
            if value is None or not 0 <= value <= 100:
                continue  # drivers have been seen returning garbage for idle buffers
            stamps.append(stamp)
            values.append(value / 100.0)
        if not stamps:
            return []
        device.sample_ts[kind] = max(stamps)
        clock = device.clocks.setdefault(kind, DriverClock())
        times = clock.to_monotonic(stamps, time.monotonic(), time.time(), _boottime())
        return sorted(zip(times, values))

    def utilization(self) -> tuple[float, float] | Any:
        """(gpu, memory) busy ratios over the driver's last sample period."""
        got = self._call("nvmlDeviceGetUtilizationRates", self.nv.nvmlDeviceGetUtilizationRates, self.handle)
        if got is NA:
            return NA
        return (min(1.0, got.gpu / 100.0), min(1.0, got.memory / 100.0))

    def gpm(self, stream: str = "device", gpu_instance: int | None = None) -> dict[str, float] | Any:
        """GPM metrics over the interval since this stream's previous call: {} on the first
        call, NA where GPM is not offered. Ratios are 0..1, rates bytes per second."""
        nv, device = self.nv, self.device
        info = self.static_info()
        if info is NA or not info.gpm_supported:
            return NA
        state = device.gpm.setdefault(stream, _Gpm())
        if state.spare is None:
            sample = self._call("nvmlGpmSampleAlloc", nv.nvmlGpmSampleAlloc)
            if sample is NA:
                return NA
            state.spare = sample
        current = state.spare
        if gpu_instance is None:
            got = self._call("nvmlGpmSampleGet", nv.nvmlGpmSampleGet, self.handle, current)
        else:
            got = self._call("nvmlGpmMigSampleGet", nv.nvmlGpmMigSampleGet, self.handle, gpu_instance, current)
        if got is NA:
            return NA
        previous = state.previous
        state.previous, state.spare = current, previous
        if previous is None:
            return {}
        skips = device.skips
        wanted = [(metric, key, getattr(nv, constant), name, scale)
                  for metric, key, constant, name, scale in _GPM_WANTED if key not in skips]
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = previous
        request.sample2 = current
        metrics = request.metrics
        for i, (_, _, metric_id, _, _) in enumerate(wanted):
            _set(metrics[i], "metricId", metric_id)
        got = self._call("nvmlGpmMetricsGet", nv.nvmlGpmMetricsGet, request)
        if got is NA:
            return NA
        values: dict[str, float] = {}
        metrics, success = _get(got, "metrics"), nv.NVML_SUCCESS
        for i, (_, key, _, name, scale) in enumerate(wanted):
            result = metrics[i]
            returned = _get(result, "nvmlReturn")
            if returned != success:
                if returned in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND):
                    self._failed(key, returned, ())
                continue  # anything else may be about this interval only
            value = float(_get(result, "value")) * scale
            if value != value or value < 0:
                continue
            values[name] = min(value, 1.0) if scale == 0.01 else value
        return values

    # -- memory, clocks, power, thermal ------------------------------------------------------
    def memory(self) -> Memory | Any:
        nv = self.nv
        got = self._first(
            ("nvmlDeviceGetMemoryInfo_v2", nv.nvmlDeviceGetMemoryInfo, (self.handle, nv.nvmlMemory_v2)),
            ("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo, (self.handle,)),
        )
        if got is NA:
            return NA
        reserved = getattr(got, "reserved", None)  # only the _v2 struct has it
        return Memory(float(got.total), float(got.used), float(got.free), None if reserved is None else float(reserved))

    def clocks(self) -> dict[str, float]:
        nv = self.nv
        out = {}
        for name, clock in (("sm", "NVML_CLOCK_SM"), ("memory", "NVML_CLOCK_MEM")):
            mhz = self._call(f"nvmlDeviceGetClockInfo({clock})", nv.nvmlDeviceGetClockInfo, self.handle, getattr(nv, clock))
            if mhz is not NA:
                out[name] = float(mhz) * 1e6
        return out

    def power_watts(self) -> float | Any:
        mw = self._call("nvmlDeviceGetPowerUsage", self.nv.nvmlDeviceGetPowerUsage, self.handle)
        return NA if mw is NA else mw / 1000.0

    def power_limit_watts(self) -> float | Any:
        mw = self._call("nvmlDeviceGetEnforcedPowerLimit", self.nv.nvmlDeviceGetEnforcedPowerLimit, self.handle)
        return NA if mw is NA else mw / 1000.0

    def energy_joules(self) -> float | Any:
        mj = self._call("nvmlDeviceGetTotalEnergyConsumption", self.nv.nvmlDeviceGetTotalEnergyConsumption, self.handle)
        return NA if mj is NA else mj / 1000.0

    def temperature_celsius(self) -> float | Any:
        nv = self.nv
        got = self._first(
            ("nvmlDeviceGetTemperatureV", nv.nvmlDeviceGetTemperatureV, (self.handle, nv.NVML_TEMPERATURE_GPU)),
            ("nvmlDeviceGetTemperature", nv.nvmlDeviceGetTemperature, (self.handle, nv.NVML_TEMPERATURE_GPU)),
        )
        return NA if got is NA else float(got)

    def clocks_event_reasons(self) -> int | Any:
        nv = self.nv
        return self._first(
            ("nvmlDeviceGetCurrentClocksEventReasons", nv.nvmlDeviceGetCurrentClocksEventReasons, (self.handle,)),
            ("nvmlDeviceGetCurrentClocksThrottleReasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, (self.handle,)),
        )

    def violation_seconds(self) -> dict[str, float]:
        nv = self.nv
        out = {}
        for name, policy in (("power", "NVML_PERF_POLICY_POWER"), ("thermal", "NVML_PERF_POLICY_THERMAL")):
            got = self._call(f"nvmlDeviceGetViolationStatus({policy})", nv.nvmlDeviceGetViolationStatus,
                             self.handle, getattr(nv, policy))
            if got is not NA:
                out[name] = got.violationTime / 1e9  # nanoseconds
        return out

    # -- PCIe --------------------------------------------------------------------------------
    def pcie_bytes(self) -> tuple[float | None, float | None] | Any:
        """Cumulative PCIe (tx, rx) bytes from the driver's field counters."""
        got = self._fields({"tx": ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0), "rx": ("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0)})
        tx, rx = got.get("tx", NA), got.get("rx", NA)
        if tx is NA and rx is NA:
            return NA
        return (None if tx is NA else tx, None if rx is NA else rx)

    def pcie_throughput(self) -> tuple[float | None, float | None] | Any:
        """PCIe (tx, rx) bytes per second over the driver's 20 ms sample (KiB/s in NVML)."""
        nv = self.nv
        tx, rx = (self._call(f"nvmlDeviceGetPcieThroughput({counter})", nv.nvmlDeviceGetPcieThroughput,
                             self.handle, getattr(nv, counter))
                  for counter in ("NVML_PCIE_UTIL_TX_BYTES", "NVML_PCIE_UTIL_RX_BYTES"))
        if tx is NA and rx is NA:
            return NA
        return (None if tx is NA else tx * KIB, None if rx is NA else rx * KIB)

    def pcie_link(self) -> PcieLink | Any:
        nv, h = self.nv, self.handle
        values = [self._call(name, getattr(nv, name), h) for name in (
            "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
            "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
            "nvmlDeviceGetGpuMaxPcieLinkGeneration")]
        if all(v is NA for v in values):
            return NA
        return PcieLink(*(None if v is NA else int(v) for v in values))

    def pcie_replays(self) -> int | Any:
        return self._call("nvmlDeviceGetPcieReplayCounter", self.nv.nvmlDeviceGetPcieReplayCounter, self.handle)

    # -- NVLink ------------------------------------------------------------------------------
    def nvlinks(self, links: Sequence[int]) -> list[NvLink]:
        nv, h = self.nv, self.handle
        wanted = {}
        for link in links:
            wanted[f"tx{link}"] = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", link)
            wanted[f"rx{link}"] = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", link)
        counters = self._fields(wanted) if wanted else {}
        out = []
        for link in links:
            state = self._call(f"nvmlDeviceGetNvLinkState:{link}", nv.nvmlDeviceGetNvLinkState, h, link)
            errors = {}
            for counter, name in _NVLINK_ERRORS:
                got = self._call(f"nvmlDeviceGetNvLinkErrorCounter(NVML_NVLINK_ERROR_{counter}):{link}",
                                 nv.nvmlDeviceGetNvLinkErrorCounter, h, link, getattr(nv, f"NVML_NVLINK_ERROR_{counter}"))
                if got is not NA:
                    errors[name] = float(got)
            tx, rx = counters.get(f"tx{link}", NA), counters.get(f"rx{link}", NA)
            out.append(NvLink(
                link, None if state is NA else state == nv.NVML_FEATURE_ENABLED,
                None if tx is NA else tx * KIB, None if rx is NA else rx * KIB, errors,
            ))
        return out

    # -- events, processes, MIG, topology ----------------------------------------------------
    def xid_events(self) -> list[int] | Any:
        """XID codes of critical-error events queued since the last call (never waits)."""
        nv, device = self.nv, self.device
        if device.event_set is None:
            if "nvmlDeviceRegisterEvents" in device.skips:
                return NA
            event_set = self._call("nvmlEventSetCreate", nv.nvmlEventSetCreate)
            if event_set is NA:
                return NA
            registered = self._call("nvmlDeviceRegisterEvents", nv.nvmlDeviceRegisterEvents, self.handle,
                                    nv.nvmlEventTypeXidCriticalError, event_set)
            if registered is NA:
                self.gw._free([("event_set", event_set)])
                return NA
            device.event_set = event_set
        codes = []
        for _ in range(_MAX_EVENTS_PER_READ):
            event = self._call("nvmlEventSetWait_v2", nv.nvmlEventSetWait_v2, device.event_set, 0,
                               empty_on=(nv.NVML_ERROR_TIMEOUT,))
            if event is EMPTY:
                break
            if event is NA:
                return codes or NA
            if event.eventType & nv.nvmlEventTypeXidCriticalError:
                codes.append(int(event.eventData))
        return codes

    def processes(self) -> list[GpuProcess] | Any:
        nv = self.nv
        got = self._first(
            ("nvmlDeviceGetComputeRunningProcesses_v3", nv.nvmlDeviceGetComputeRunningProcesses_v3, (self.handle,)),
            ("nvmlDeviceGetComputeRunningProcesses_v2", nv.nvmlDeviceGetComputeRunningProcesses_v2, (self.handle,)),
        )
        if got is NA:
            return NA
        out = []
        for p in got:
            gi = getattr(p, "gpuInstanceId", _NOT_A_MIG_ID)
            ci = getattr(p, "computeInstanceId", _NOT_A_MIG_ID)
            used = p.usedGpuMemory
            out.append(GpuProcess(
                int(p.pid), None if used is None else float(used),
                None if gi == _NOT_A_MIG_ID else int(gi), None if ci == _NOT_A_MIG_ID else int(ci),
            ))
        return out

    def process_utilization(self) -> dict[int, float] | Any:
        """pid -> SM busy ratio, averaged over the driver's samples since the last call."""
        nv, device = self.nv, self.device
        got = self._call("nvmlDeviceGetProcessUtilization", nv.nvmlDeviceGetProcessUtilization, self.handle,
                         device.process_ts, empty_on=(nv.NVML_ERROR_NOT_FOUND,))
        if got is NA:
            return NA
        if got is EMPTY:
            return {}
        sums: dict[int, list[float]] = {}
        newest = device.process_ts
        for sample in got:
            newest = max(newest, int(sample.timeStamp))
            if 0 <= sample.smUtil <= 100:
                sums.setdefault(int(sample.pid), []).append(sample.smUtil / 100.0)
        device.process_ts = newest
        return {pid: sum(v) / len(v) for pid, v in sums.items()}

    def mig_instances(self) -> list[MigInstance] | Any:
        nv, h = self.nv, self.handle
        count = self._call("nvmlDeviceGetMaxMigDeviceCount", nv.nvmlDeviceGetMaxMigDeviceCount, h)
        if count is NA:
            return NA
        out = []
        for slot in range(int(count)):
            mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", nv.nvmlDeviceGetMigDeviceHandleByIndex, h, slot,
                             empty_on=(nv.NVML_ERROR_NOT_FOUND, nv.NVML_ERROR_INVALID_ARGUMENT))
            if mig is NA:
                return NA
            if mig is EMPTY:
                continue
            gi = self._call("nvmlDeviceGetGpuInstanceId", nv.nvmlDeviceGetGpuInstanceId, mig)
            ci = self._call("nvmlDeviceGetComputeInstanceId", nv.nvmlDeviceGetComputeInstanceId, mig)
            uuid = self._call("nvmlDeviceGetUUID:mig", nv.nvmlDeviceGetUUID, mig)
            if gi is NA or ci is NA or uuid is NA:
                continue
            memory = self._call("nvmlDeviceGetMemoryInfo:mig", nv.nvmlDeviceGetMemoryInfo, mig)
            out.append(MigInstance(int(gi), int(ci), str(uuid),
                                   None if memory is NA else Memory(float(memory.total), float(memory.used), float(memory.free))))
        return out

    def peer_relations(self) -> dict[str, str]:
        """{peer uuid: PIX|PXB|PHB|NODE|SYS|BOARD}: the nearest common PCIe ancestor with each
        other answering GPU, read once per handle."""
        nv, device = self.nv, self.device
        with self.gw._lock:
            peers = [(d.uuid, d.handle) for d in self.gw._devices.values()
                     if d is not device and d.lost is None and d.uuid and d.uuid not in device.peers]
        levels = {getattr(nv, f"NVML_TOPOLOGY_{level}"): name for level, name in _TOPOLOGY}
        for uuid, handle in peers:
            level = self._call(f"nvmlDeviceGetTopologyCommonAncestor:{uuid}", nv.nvmlDeviceGetTopologyCommonAncestor,
                               self.handle, handle)
            if level is not NA and level in levels:
                device.peers[uuid] = levels[level]
        return dict(device.peers)

    # -- field values ------------------------------------------------------------------------
    def _fields(self, wanted: dict[str, tuple[str, int]]) -> dict[str, Any]:
        """One nvmlDeviceGetFieldValues call for the wanted (NVML_FI_* name, scope) pairs; each
        field's own return code is classified like a call of its own."""
        nv, device = self.nv, self.device
        keys = {n: f"nvmlDeviceGetFieldValues({field}):{scope}" for n, (field, scope) in wanted.items()}
        names = [n for n in wanted if keys[n] not in device.skips]
        if not names:
            return {}
        request = [(getattr(nv, wanted[n][0]), wanted[n][1]) for n in names]
        got = self._call("nvmlDeviceGetFieldValues", nv.nvmlDeviceGetFieldValues, self.handle, request)
        if got is NA:
            return {}
        out: dict[str, Any] = {}
        members = _value_members(nv)
        for name, value in zip(names, got):
            returned = _get(value, "nvmlReturn")
            if returned != nv.NVML_SUCCESS:
                self._failed(keys[name], returned, ())
                out[name] = NA
                continue
            decoded = _union_value(members, _get(value, "value"), _get(value, "valueType"))
            out[name] = NA if decoded is None else decoded
        return out


@functools.cache
def _value_members(nv) -> dict[int, str]:
    """NVML value type -> the member of ``c_nvmlValue_t`` that holds it."""
    return {
        nv.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nv.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        nv.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }


def _union_value(members: dict[int, str], union, value_type: int) -> float | None:
    member = members.get(value_type)
    if member is None:
        return None
    return float(_get(union, member))


def _pci_bus_id(pci) -> str:
    """The bus id as sysfs writes it (dddd:bb:dd.f, lower case): NVML pads the domain to 8
    digits in its newer struct field."""
    bus_id = pci.busId or pci.busIdLegacy
    bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    parts = bus_id.lower().split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


def _architecture(nv, arch) -> str:
    if arch is NA:
        return ""
    for name in _ARCHITECTURES:
        if getattr(nv, f"NVML_DEVICE_ARCH_{name}", None) == arch:
            return name.lower()
    return ""
