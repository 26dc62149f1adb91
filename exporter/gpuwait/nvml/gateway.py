"""The NVML gateway: the one module of gpuwait that imports ``pynvml``.

It owns the library's lifecycle and turns every call into a value or ``NA`` (``None`` in
the results it hands back):

* Lazy initialisation: nothing touches the driver until the first read. When NVML cannot be
  initialised (no library, no driver, version mismatch) the gateway says so in ONE log line,
  reports the backend down, and retries in the background with backoff up to
  ``retry_max`` seconds; a driver loaded later is picked up without a restart.
* Errors are classified by code (``errors.py``): calls a GPU does not offer are remembered
  per GPU and call and not asked again; a GPU that is lost is marked down while the others
  keep reporting, and is probed again with backoff; a driver that went away takes the
  backend down and triggers a re-initialisation.
* Calls are bounded: each GPU's calls run on that GPU's own worker thread (one per GPU and
  lane, so the slow tier's reads never queue behind the fast tier's or the other way round)
  and the caller waits with a deadline (``executor.py``). A call that hangs costs one read of
  that GPU; the call is then quarantined on that GPU, and the other GPUs never wait for it.

One lock (``Gateway._lock``) guards the lifecycle and the per-GPU bookkeeping; it is never
held during a driver call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuwait.nvml.errors import Abandoned, Classifier, ErrorClass, call_name
from gpuwait.nvml.executor import DeviceExecutor, Partial, Ticket, wait_all
from gpuwait.nvml.session import DeviceSession, DeviceState
from gpuwait.nvml.values import NA, BackendStatus

log = logging.getLogger("gpuwait.nvml")


def import_nvml():
    """The pynvml module (nvidia-ml-py); tests put a double of the same name first on the path."""
    import pynvml

    return pynvml


#: Why the backend is down, by the error nvmlInit raised: one clear phrase each.
_INIT_REASONS = {
    "LIBRARY_NOT_FOUND": "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver installed on this host?)",
    "DRIVER_NOT_LOADED": "NVIDIA kernel driver not loaded",
    "LIB_RM_VERSION_MISMATCH": "NVML library and NVIDIA kernel driver versions differ (driver upgraded without reboot?)",
    "NO_PERMISSION": "no permission to open the NVIDIA device files (/dev/nvidia*)",
    "INSUFFICIENT_POWER": "a GPU reports insufficient external power",
}

@dataclass(frozen=True)
class DeviceResult:
    """What one job read from one GPU. ``values`` maps what the job put to its value, or to
    None where the GPU did not answer (NA stops at the gateway: gpuwait.core's convention)."""

    index: int
    uuid: str
    up: bool
    values: dict[str, Any]
    #: Parts that could not be read, as stable cause keys for Reading.errors.
    causes: tuple[str, ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)


class Gateway:
    def __init__(self, call_timeout: float = 2.0, retry_max: float = 60.0, nvml=None,
                 first_retry: float = 2.0, max_stuck_calls: int = 3) -> None:
        self.call_timeout = call_timeout
        self.retry_max = retry_max
        self.first_retry = min(first_retry, retry_max)
        self.max_stuck_calls = max_stuck_calls
        self._nvml_override = nvml
        self.nv = None
        self.errors: Classifier | None = None
        self._lock = threading.Lock()
        self._status = BackendStatus(False, "not initialised yet")
        self._initialised = False  # nvmlInit succeeded and nvmlShutdown is owed
        self._generation = 0
        self._devices: dict[str, DeviceState] = {}
        self._init_thread: threading.Thread | None = None
        self._next_init = 0.0
        self._init_started = 0.0
        self._init_backoff = self.first_retry
        self._logged_down_reason: str | None = None
        self._logged_skips: set[tuple[str, str]] = set()
        self._logged_no_gpm: set[str] = set()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def status(self) -> BackendStatus:
        return self._status

    def ensure(self) -> BackendStatus:
        """Initialise NVML if due (first use, or a retry after backoff); never blocks longer
        than the call timeout, even when nvmlInit itself hangs."""
        now = time.monotonic()
        with self._lock:
            if self._status.up or self._closed:
                return self._status
            thread = self._init_thread
            if thread is None:
                if now < self._next_init:
                    return self._status
                thread = threading.Thread(target=self._initialise, name="nvml-init", daemon=True)
                self._init_thread = thread
                self._init_started = now
                thread.start()
        # Readers wait for an attempt only within its first call timeout: a hung nvmlInit
        # finishes (or not) in the background without holding up every read.
        thread.join(max(0.0, self._init_started + self.call_timeout - now))
        return self._status

    def _load(self):
        if self.nv is None:
            self.nv = self._nvml_override if self._nvml_override is not None else import_nvml()
            self.errors = Classifier(self.nv)
        return self.nv

    def _initialise(self) -> None:
        try:
            try:
                nv = self._load()
            except ImportError as e:
                self._init_failed(f"the pynvml module (package nvidia-ml-py) cannot be imported: {e}")
                return
            with self._lock:
                for device in self._devices.values():
                    # Not freed: an abandoned call may still hold one of them, and freeing it
                    # under that call would be a use-after-free in the driver's library. A few
                    # small buffers per driver reload is the cheaper price.
                    device.reset_handle_state()
                was_initialised, self._initialised = self._initialised, False
            if was_initialised:
                try:
                    nv.nvmlShutdown()
                except nv.NVMLError:
                    pass
            try:
                nv.nvmlInit()
            except nv.NVMLError as e:
                name = self.errors.name(e.value)
                self._init_failed(_INIT_REASONS.get(name, f"nvmlInit failed with {name}"))
                return
            with self._lock:
                self._initialised = True
            driver = self._system_string(nv.nvmlSystemGetDriverVersion)
            nvml_version = self._system_string(nv.nvmlSystemGetNVMLVersion)
            cuda = self._cuda_version(nv)
            try:
                count = nv.nvmlDeviceGetCount()
            except nv.NVMLError as e:
                self._init_failed(f"nvmlDeviceGetCount failed with {self.errors.name(e.value)}")
                return
            found: list[tuple[int, str, Any, str | None]] = []
            for index in range(count):
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                    uuid = nv.nvmlDeviceGetUUID(handle)
                    found.append((index, uuid, handle, None))
                except nv.NVMLError as e:
                    found.append((index, "", None, self.errors.name(e.value)))
            self._adopt(found, BackendStatus(True, "", driver, cuda, nvml_version))
        except Exception:  # a bug here must not leave the backend "initialising" forever
            log.error("NVML initialisation failed unexpectedly", exc_info=True)
            self._init_failed("NVML initialisation failed unexpectedly (see the error above)")
        finally:
            with self._lock:
                self._init_thread = None

    def _system_string(self, fn: Callable[[], str]) -> str:
        try:
            return str(fn())
        except self.nv.NVMLError:
            return ""

    def _cuda_version(self, nv) -> str:
        for fn_name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            try:
                version = int(getattr(nv, fn_name)())
            except nv.NVMLError:
                continue
            return f"{version // 1000}.{version % 1000 // 10}"
        return ""

    def _adopt(self, found: list[tuple[int, str, Any, str | None]], status: BackendStatus) -> None:
        now = time.monotonic()
        with self._lock:
            seen: set[str] = set()
            for index, uuid, handle, error in found:
                key = uuid or f"index:{index}"
                seen.add(key)
                device = self._devices.get(key)
                if device is None:
                    device = DeviceState(index, uuid, handle)
                    self._devices[key] = device
                device.index, device.handle = index, handle
                device.skips = {}
                device.quarantine = {}
                if error is None:
                    device.lost = None
                    device.probe_backoff = self.first_retry
                else:
                    self._mark_lost_locked(device, error, now)
            for key, device in self._devices.items():
                if key not in seen and device.lost is None:
                    self._mark_lost_locked(device, "GPU_NOT_FOUND", now)
            self._generation += 1
            self._status = status
            self._init_backoff = self.first_retry
            self._logged_down_reason = None
            self._logged_skips.clear()
            up = sum(1 for d in self._devices.values() if d.lost is None)
        log.info("NVML ready: driver %s, CUDA %s, %d GPUs (%d answering)",
                 status.driver_version or "?", status.cuda_version or "?", len(found), up)

    def _executor(self, device: DeviceState, lane: str) -> DeviceExecutor:
        with self._lock:
            executor = device.executors.get(lane)
            if executor is None:
                executor = device.executors[lane] = DeviceExecutor(f"gpu{device.index}-{lane}", max_stuck=self.max_stuck_calls)
            return executor

    def _init_failed(self, reason: str) -> None:
        with self._lock:
            self._status = BackendStatus(False, reason)
            self._next_init = time.monotonic() + self._init_backoff
            retry = self._init_backoff
            self._init_backoff = min(self._init_backoff * 2, self.retry_max)
            first_time = reason != self._logged_down_reason
            self._logged_down_reason = reason
        if first_time:
            log.warning("no GPU backend: %s; GPU metrics are left out (gpuwait_gpu_backend_up 0), "
                        "retrying in the background every %gs at most", reason, self.retry_max)
        else:
            log.debug("NVML still unavailable (%s); next attempt in %gs", reason, retry)

    def _driver_lost(self, error: str, call: str, generation: int) -> None:
        with self._lock:
            if generation != self._generation or not self._status.up:
                return
            self._status = BackendStatus(False, f"driver went away ({error} from {call})")
            self._next_init = time.monotonic() + self.first_retry
            self._init_backoff = self.first_retry
            self._logged_down_reason = self._status.reason
        log.warning("NVML backend lost: %s answered %s; every GPU reports gpuwait_gpu_up 0 "
                    "until NVML is initialised again (retrying with backoff)", call, error)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            resources = []
            for device in self._devices.values():
                resources += device.reset_handle_state()
            initialised, self._initialised = self._initialised, False
            executors = [e for d in self._devices.values() for e in d.executors.values()]
        stuck = any(executor.stuck for executor in executors)
        for executor in executors:
            executor.close()
        if initialised:
            def shutdown() -> None:
                if not stuck:  # see _initialise: never free what a hung call may hold
                    self._free(resources)
                try:
                    self.nv.nvmlShutdown()
                except self.nv.NVMLError:
                    pass
            t = threading.Thread(target=shutdown, name="nvml-shutdown", daemon=True)
            t.start()
            t.join(self.call_timeout)

    def _free(self, resources: Iterable[Any]) -> None:
        nv = self.nv
        for resource in resources:
            try:
                if isinstance(resource, tuple) and resource[0] == "event_set":
                    nv.nvmlEventSetFree(resource[1])
                else:
                    nv.nvmlGpmSampleFree(resource)
            except nv.NVMLError:
                pass

    # -- per-GPU bookkeeping -----------------------------------------------------------------
    def _mark_lost_locked(self, device: DeviceState, error: str, now: float) -> None:
        if device.lost is None:
            device.probe_backoff = self.first_retry
        device.lost = error
        device.next_probe = now + device.probe_backoff
        device.probe_backoff = min(device.probe_backoff * 2, self.retry_max)

    def _device_lost(self, device: DeviceState, error: str, call: str, generation: int) -> None:
        with self._lock:
            if generation != self._generation or device.lost is not None:
                return
            self._mark_lost_locked(device, error, time.monotonic())
        log.warning("GPU %d (%s) lost: %s answered %s; it reports gpuwait_gpu_up 0 while the other GPUs "
                    "keep reporting, and is probed again with backoff", device.index, device.uuid, call, error)

    def _skip(self, device: DeviceState, key: str, code: int) -> None:
        name = self.errors.name(code)
        retry_at = None
        if code in self.errors.skip_for_now:
            retry_at = time.monotonic() + self.retry_max
        call = call_name(key)
        with self._lock:
            device.skips[key] = (name, retry_at)
            first = (call, name) not in self._logged_skips
            self._logged_skips.add((call, name))
        if first:
            when = "asked again later" if retry_at is not None else "not asked again until NVML is re-initialised"
            log.info("%s answered %s on GPU %d; the series it feeds are left out (%s)", call, name, device.index, when)
        else:
            log.debug("%s answered %s on GPU %d", key, name, device.index)

    def _quarantine(self, device: DeviceState, key: str) -> None:
        with self._lock:
            _, previous_wait = device.quarantine.get(key, (0.0, 0.0))
            wait = min(max(previous_wait * 2, self.retry_max), 16 * self.retry_max)
            device.quarantine[key] = (time.monotonic() + wait, wait)

    def devices(self) -> list[tuple[int, str, bool]]:
        """(index, uuid, answering) of every GPU seen since start."""
        with self._lock:
            return sorted((d.index, d.uuid, d.lost is None) for d in self._devices.values())

    def error_counts(self) -> dict[tuple[int, str], dict[tuple[str, str], int]]:
        """{(index, uuid): {(call, error): count}} of classified call errors since start."""
        with self._lock:
            return {(d.index, d.uuid): dict(d.error_counts) for d in self._devices.values() if d.error_counts}

    # -- running jobs ------------------------------------------------------------------------
    def run(self, job: Callable[["DeviceSession"], None], timeout: float | None = None,
            lane: str = "default") -> list[DeviceResult]:
        """Run ``job`` once per answering GPU, each on its GPU's worker of ``lane``, all
        within one deadline. GPUs that are lost get a probe instead when their backoff allows."""
        status = self.ensure()
        with self._lock:
            devices = sorted(self._devices.values(), key=lambda d: d.index)
            generation = self._generation
        if not status.up:
            return [DeviceResult(d.index, d.uuid, False, {}) for d in devices]
        deadline = time.monotonic() + (timeout or self.call_timeout)
        now = time.monotonic()
        pending: list[tuple[DeviceExecutor, Ticket]] = []
        planned: list[tuple[DeviceState, Ticket | None, str]] = []
        for device in devices:
            if device.lost is not None:
                ticket = None
                with self._lock:  # one probe at a time, whichever lane gets there first
                    due = device.lost is not None and now >= device.next_probe
                    if due:
                        device.next_probe = now + max(device.probe_backoff, self.first_retry)
                if due:
                    executor = self._executor(device, lane)
                    ticket = executor.submit(self._probe_job(device, generation))
                    if ticket is not None:
                        pending.append((executor, ticket))
                planned.append((device, ticket, "probe"))
                continue
            executor = self._executor(device, lane)
            ticket = executor.submit(self._session_job(job, device, generation))
            if ticket is not None:
                pending.append((executor, ticket))
            planned.append((device, ticket, "job"))
        outcomes = wait_all(pending, deadline)
        results = []
        failure: BaseException | None = None
        for device, ticket, kind in planned:
            causes: list[str] = []
            values: dict[str, Any] = {}
            outcome = outcomes.get(id(ticket)) if ticket is not None else None
            if ticket is not None:
                values = ticket.out.freeze()
                causes = [k[1] for k in values if isinstance(k, tuple) and k[0] == "cause"]
                values = {k: (None if v is NA else v) for k, v in values.items() if not isinstance(k, tuple)}
                if ticket.error is not None and not isinstance(ticket.error, Abandoned) and failure is None:
                    failure = ticket.error
            if outcome == "abandoned":
                hung = ticket.stuck_in or "job"
                self._quarantine(device, hung)
                causes.append(f"gpu{device.index}:hung:{call_name(hung)}")
                with self._lock:
                    device.error_counts[(call_name(hung), "CALL_TIMEOUT")] += 1
            elif outcome == "cancelled":
                causes.append(f"gpu{device.index}:busy")
            if kind == "job" and ticket is None:
                causes.append(f"gpu{device.index}:unresponsive")
            up = device.lost is None and ticket is not None and outcome != "cancelled" and kind == "job"
            if device.lost is not None:
                causes.append(f"gpu{device.index}:lost:{device.lost}")
                values = {}
            results.append(DeviceResult(device.index, device.uuid, up, values if kind == "job" else {}, tuple(dict.fromkeys(causes))))
        if failure is not None:
            raise failure
        return results

    def _session_job(self, job, device: DeviceState, generation: int):
        def run(ticket: Ticket, out: Partial) -> None:
            try:
                job(DeviceSession(self, device, ticket, out, generation))
            except Abandoned:
                pass
        return run

    def _probe_job(self, device: DeviceState, generation: int):
        """Re-acquire a lost GPU's handle (by UUID: indices can shift) and check it answers."""
        def probe(ticket: Ticket, out: Partial) -> None:
            nv = self.nv
            ticket.current = "probe"
            try:
                if device.uuid:
                    handle = nv.nvmlDeviceGetHandleByUUID(device.uuid)
                    uuid = device.uuid
                else:
                    handle = nv.nvmlDeviceGetHandleByIndex(device.index)
                    uuid = nv.nvmlDeviceGetUUID(handle)
            except nv.NVMLError as e:
                self._probe_failed(device, e.value, generation)
                return
            try:
                nv.nvmlDeviceGetMemoryInfo(handle)
            except nv.NVMLError as e:
                if self.errors.classify(e.value) is not ErrorClass.SKIP:
                    self._probe_failed(device, e.value, generation)
                    return
            if ticket.abandoned:
                return
            with self._lock:
                if generation != self._generation:
                    return
                device.reset_handle_state()  # not freed, as in _initialise
                if not device.uuid:
                    self._devices.pop(f"index:{device.index}", None)
                    self._devices[uuid] = device
                device.uuid = uuid
                device.handle = handle
                device.lost = None
                device.probe_backoff = self.first_retry
                device.skips = {}
                device.quarantine = {}
            log.info("GPU %d (%s) answers again", device.index, device.uuid)
        return probe

    def _probe_failed(self, device: DeviceState, code: int, generation: int) -> None:
        name = self.errors.name(code)
        if self.errors.classify(code) is ErrorClass.DRIVER_GONE:
            self._driver_lost(name, "probe", generation)
            return
        with self._lock:
            if generation == self._generation:
                # Keep the reason it was lost for: the cause key stays stable while it is away.
                self._mark_lost_locked(device, device.lost or name, time.monotonic())
