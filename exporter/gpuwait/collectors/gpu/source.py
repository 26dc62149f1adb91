"""GPUs through NVML: a fast source for what moves within a second, a slow one for the rest.

``gpu`` (fast tier) reads, per GPU and tick: the driver's utilization sample buffers (every
sample since the last read, for sub-second resolution), PCIe byte counters, clock-event
reasons and GPM metrics. Its rows enter the window ring through ``SlotRows``.

``gpu_device`` (slow tier) reads what changes slowly or costs more: identity and
configuration, memory capacity, clocks, power, energy, temperature, violation times, PCIe
link state, NVLink per link, XID events, processes, MIG instances and topology.

Both go through one shared NVML gateway; neither imports pynvml. When no GPU backend is
available the reads still succeed, carrying the backend's state, so that host metrics and
``gpuwait_gpu_backend_up 0`` are served and nothing is logged per tick.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import replace

from gpuwait.collectors.gpu import window
from gpuwait.collectors.gpu.payload import GpuDevice, GpuDeviceData, GpuFastData, GpuTick, OwnerState, OwnerUse
from gpuwait.core import topology
from gpuwait.core.config import Option, Settings, parse_bool, parse_duration
from gpuwait.core.reading import Reading
from gpuwait.core.source import HostPaths, Source
from gpuwait.nvml.gateway import DeviceResult, Gateway
from gpuwait.nvml.session import DeviceSession
from gpuwait.nvml.values import NA
from gpuwait.owners import kubelet
from gpuwait.owners.kubelet import KubeletPods, KubeletStatus
from gpuwait.owners.directory import acquire_directory, release_directory
from gpuwait.owners.tracker import ActivityReport, OwnerTracker

CALL_TIMEOUT = Option("collector.gpu.call-timeout", parse_duration, 2.0,
                      "Longest wait for one GPU's NVML calls in one read; a call still running then is "
                      "abandoned, its GPU's other readings are kept and the call is not retried for a while.",
                      "DURATION")
RETRY_MAX_INTERVAL = Option("collector.gpu.retry-max-interval", parse_duration, 60.0,
                            "Longest wait between attempts to initialise NVML, to reach a lost GPU again, or to "
                            "repeat a call that answered NOT_FOUND, NO_DATA or NOT_READY.", "DURATION")
GPM = Option("collector.gpu.gpm", parse_bool, True,
             "Read GPM metrics (SM activity, occupancy, tensor, DRAM bandwidth) on GPUs that offer "
             "them (Hopper and newer).", "BOOL")
PROCESSES = Option("collector.gpu.processes", parse_bool, True,
                   "Read the compute processes on each GPU and attribute them to their owners.", "BOOL")

#: With no new driver sample for this long, the GPU is polled instead: an idle GPU's sample
#: buffer can run dry, and an idle GPU must read as 0, not as absent.
STALE_SAMPLES_SECONDS = 1.0
#: The longest a window row waits for late driver samples.
MAX_ROW_HOLD_SECONDS = 1.0


# -- the shared gateway ---------------------------------------------------------------------
_shared_lock = threading.Lock()
_shared: Gateway | None = None
_shared_users = 0


def shared_gateway(settings: Settings) -> Gateway:
    global _shared, _shared_users
    with _shared_lock:
        if _shared is None:
            _shared = Gateway(call_timeout=settings[CALL_TIMEOUT], retry_max=settings[RETRY_MAX_INTERVAL])
        _shared_users += 1
        return _shared


def release_gateway(gateway: Gateway) -> None:
    global _shared, _shared_users
    with _shared_lock:
        if gateway is not _shared:
            gateway.close()
            return
        _shared_users -= 1
        if _shared_users <= 0:
            _shared, _shared_users = None, 0
            gateway.close()


# -- fast ------------------------------------------------------------------------------------
class GpuSource(Source):
    name = "gpu"
    tier = "fast"

    def __init__(self, paths: HostPaths, settings: Settings, gateway: Gateway | None = None) -> None:
        super().__init__(paths)
        self.settings = settings
        self._own_gateway = gateway is None
        self.gateway = gateway or shared_gateway(settings)
        self.gpm_enabled = settings[GPM]
        self.slots = window.SlotRows(settings.sample_interval)
        #: uuid -> monotonic time of the newest utilization value (sampled or polled)
        self._newest: dict[str, float] = {}
        #: uuid -> monotonic time of the newest driver sample
        self._newest_sample: dict[str, float] = {}
        #: uuid -> (gpu busy, memory busy) last seen: a tick without a new driver sample
        #: still reports the value that holds, so the gauge does not flicker.
        self._latest: dict[str, list[float | None]] = {}

    def read(self) -> Reading:
        return self.decode(self.capture())

    def capture(self) -> tuple[float, str | None, list]:
        """The time, why NVML is not up (None when it is), and what each GPU's job put (or,
        NVML down, the GPUs known): the driver's calls are made now, the rows later."""
        t = time.monotonic()
        status = self.gateway.ensure()
        if not status.up:
            return t, status.reason, list(self.gateway.devices())
        return t, None, self.gateway.run(self._job, lane="fast")

    def decode(self, captured: tuple[float, str | None, list]) -> Reading:
        t, down, results = captured
        if down is not None:
            return self.reading(t, GpuFastData(False, down, tuple(GpuTick(i, u, False) for i, u, _ in results)))
        ticks = []
        errors: list[str] = []
        for result in results:
            errors.extend(result.causes)
            ticks.append(self._tick(t, result))
        until = t
        for uuid, newest in self._newest.items():
            if t - newest <= MAX_ROW_HOLD_SECONDS:
                until = min(until, newest)
        rows = tuple((slot_t - t, values) for slot_t, values in self.slots.flush(max(until, t - MAX_ROW_HOLD_SECONDS)))
        return self.reading(t, GpuFastData(True, "", tuple(ticks), rows), tuple(dict.fromkeys(errors)))

    def _job(self, s: DeviceSession) -> None:
        samples = s.utilization_samples("gpu")
        s.put("samples", samples)
        if samples:
            # Here, not where the rows are made: the next job decides on it, and the rows of
            # this one may be made after it.
            self._newest_sample[s.uuid] = samples[-1][0]
        s.put("memory_samples", s.utilization_samples("memory"))
        newest = self._newest_sample.get(s.uuid)
        if samples is NA or (not samples and (newest is None or time.monotonic() - newest > STALE_SAMPLES_SECONDS)):
            s.put("polled", s.utilization())
        s.put("pcie", s.pcie_bytes())
        s.put("reasons", s.clocks_event_reasons())
        if self.gpm_enabled:
            s.put("gpm", s.gpm("fast"))

    def _tick(self, t: float, result: DeviceResult) -> GpuTick:
        if not result.up and not result.values:
            return GpuTick(result.index, result.uuid, False)
        index, uuid = str(result.index), result.uuid
        add = self.slots.add
        latest = self._latest.setdefault(uuid, [None, None])
        utilization, memory_busy = latest
        samples = result.get("samples")
        count = 0
        if samples:
            for ts, value in samples:
                add(ts, (window.UTIL, index, uuid), value)
            utilization = samples[-1][1]
            count = len(samples)
            self._newest[uuid] = samples[-1][0]
        memory_samples = result.get("memory_samples")
        if memory_samples:
            for ts, value in memory_samples:
                add(ts, (window.MEM, index, uuid), value)
            memory_busy = memory_samples[-1][1]
        polled = result.get("polled")
        if polled:
            gpu_busy, mem_busy = polled
            add(t, (window.UTIL, index, uuid), gpu_busy)
            utilization = gpu_busy
            self._newest[uuid] = t
            if not memory_samples:
                add(t, (window.MEM, index, uuid), mem_busy)
                memory_busy = mem_busy
        latest[0], latest[1] = utilization, memory_busy
        if t - self._newest.get(uuid, t) > 2 * STALE_SAMPLES_SECONDS:
            utilization = memory_busy = None  # neither sampled nor polled lately: not known now
        pcie = result.get("pcie")
        tx = rx = None
        if pcie:
            tx, rx = pcie
            if tx is not None:
                add(t, (window.PCIE_TX, index, uuid), tx, last=True)
            if rx is not None:
                add(t, (window.PCIE_RX, index, uuid), rx, last=True)
        reasons = result.get("reasons")
        if reasons is not None:
            add(t, (window.REASONS, index, uuid), float(reasons), last=True)
        gpm = result.get("gpm") or {}
        for name, signal in window.GPM_SIGNALS:
            if name in gpm:
                add(t, (signal, index, uuid), gpm[name])
        return GpuTick(result.index, uuid, result.up, utilization, memory_busy, count, tx, rx, reasons, dict(gpm))

    def close(self) -> None:
        if self._own_gateway:
            release_gateway(self.gateway)


def fast_rows(reading: Reading):
    return [(reading.t + offset, values) for offset, values in reading.data.rows]


# -- slow ------------------------------------------------------------------------------------
class GpuDeviceSource(Source):
    name = "gpu_device"
    tier = "slow"

    def __init__(self, paths: HostPaths, settings: Settings, gateway: Gateway | None = None) -> None:
        super().__init__(paths)
        self.settings = settings
        self._own_gateway = gateway is None
        self.gateway = gateway or shared_gateway(settings)
        self.processes_enabled = settings[PROCESSES]
        self.gpm_enabled = settings[GPM]
        self._xids: dict[str, Counter] = {}
        self.tracker: OwnerTracker | None = None
        self.kubelet: KubeletPods | None = None
        #: where the owner cgroup source learns who holds a GPU
        self.owner_directory = acquire_directory(paths)

    def _start_owners(self) -> None:
        # At the first read, not at construction: an exporter that fails to start (a bad
        # listen address) starts no kubelet thread and logs nothing about pods.
        if self.processes_enabled and self.tracker is None:
            self.kubelet = kubelet.from_settings(self.settings)
            self.tracker = OwnerTracker(self.paths, resolve_pod=self.kubelet)

    def read(self) -> Reading:
        t = time.monotonic()
        self._start_owners()
        status = self.gateway.ensure()
        if not status.up:
            gpus = tuple(GpuDevice(i, u, False) for i, u, _ in self.gateway.devices())
            return self.reading(t, GpuDeviceData(False, status.reason, "", "", gpus, self.gateway.error_counts(),
                                                 kubelet=self._kubelet_status()))
        results = self.gateway.run(self._job, lane="slow")
        errors: list[str] = []
        gpus = []
        for result in results:
            errors.extend(result.causes)
            gpus.append(self._device(result))
        owners: dict[str, OwnerState] = {}
        if self.tracker is not None:
            pids = {p.pid for g in gpus for p in g.processes or ()}
            attributed = []
            if pids:
                report = self.tracker.sample(pids)
                errors.extend(report.errors)
                gpus = [replace(g, owners=_owner_uses(g, report, self.kubelet)) for g in gpus]
                owners = _owner_states(report)
                attributed = [a.owner for a in report.owners.values()]
            self.owner_directory.update(attributed)
        gpus = self._with_nics(gpus)
        # Read after the owners were named: a pod UID the list lacked fetched it during this read.
        data = GpuDeviceData(True, "", status.driver_version, status.cuda_version, tuple(gpus),
                             self.gateway.error_counts(), owners, self._kubelet_status())
        return self.reading(t, data, tuple(dict.fromkeys(errors)))

    def _kubelet_status(self) -> KubeletStatus | None:
        return self.kubelet.status() if self.kubelet is not None else None

    def _with_nics(self, gpus: list[GpuDevice]) -> list[GpuDevice]:
        """Each GPU's PCIe relation to each RDMA NIC (A10), and its NUMA node from sysfs where
        NVML does not tell it."""
        nics = topology.rdma_devices(self.paths)
        single_node = topology.single_numa_node(self.paths)
        out = []
        for g in gpus:
            where = topology.locate(self.paths, g.info.pci_bus_id) if g.info and g.info.pci_bus_id else None
            if where is None:
                out.append(g)
                continue
            relations = {}
            for nic in nics:
                relation = topology.relation(where, nic, single_numa_node=single_node)
                if relation is not None:
                    relations[nic.device] = relation
            info = g.info
            if info.numa_node is None and where.numa_node >= 0:
                info = replace(info, numa_node=where.numa_node)
            out.append(replace(g, nics=relations, info=info))
        return out

    def _job(self, s: DeviceSession) -> None:
        info = s.info()
        s.put("info", info)
        s.put("memory", s.memory())
        s.put("utilization", s.utilization())
        s.put("clocks", s.clocks())
        s.put("power", s.power_watts())
        s.put("power_limit", s.power_limit_watts())
        s.put("energy", s.energy_joules())
        s.put("temperature", s.temperature_celsius())
        s.put("violations", s.violation_seconds())
        s.put("pcie", s.pcie_link())
        s.put("replays", s.pcie_replays())
        if s.pcie_bytes() is NA:
            s.put("pcie_throughput", s.pcie_throughput())
        s.put("xids", s.xid_events())
        if info is not NA:
            s.put("nvlinks", s.nvlinks(info.nvlink_links))
            if info.mig_mode:
                mig = s.mig_instances()
                s.put("mig", mig)
                if self.gpm_enabled and mig:
                    s.put("mig_gpm", {gi: m for gi in sorted({i.gpu_instance for i in mig})
                                      if (m := s.gpm(f"mig{gi}", gpu_instance=gi))})
        if self.processes_enabled:
            s.put("processes", s.processes())
            s.put("process_sm", s.process_utilization())
        s.put("peers", s.peer_relations())

    def _device(self, result: DeviceResult) -> GpuDevice:
        if not result.values:
            return GpuDevice(result.index, result.uuid, result.up)
        get = result.get
        xids = self._xids.setdefault(result.uuid, Counter())
        for code in get("xids") or ():
            xids[code] += 1
        utilization = get("utilization")
        processes = get("processes")
        return GpuDevice(
            result.index, result.uuid, result.up,
            info=get("info"),
            memory=get("memory"),
            utilization=utilization[0] if utilization else None,
            memory_busy=utilization[1] if utilization else None,
            clocks=get("clocks") or {},
            power_watts=get("power"),
            power_limit_watts=get("power_limit"),
            energy_joules=get("energy"),
            temperature_celsius=get("temperature"),
            violation_seconds=get("violations") or {},
            pcie=get("pcie"),
            pcie_replays=get("replays"),
            pcie_throughput=get("pcie_throughput"),
            nvlinks=tuple(get("nvlinks") or ()),
            xids=dict(xids),
            processes=None if processes is None else tuple(processes),
            process_sm=get("process_sm") or {},
            mig=tuple(get("mig") or ()),
            mig_gpm=get("mig_gpm") or {},
            peers=get("peers") or {},
        )

    def close(self) -> None:
        release_directory(self.paths)
        if self.kubelet is not None:
            self.kubelet.close()
        if self._own_gateway:
            release_gateway(self.gateway)


def _owner_uses(gpu: GpuDevice, report: ActivityReport, pods: KubeletPods | None = None) -> tuple[OwnerUse, ...]:
    uses: dict[str, list] = {}
    containers: dict[str, dict[str, str]] = {}
    for process in gpu.processes or ():
        owner = report.owner_of.get(process.pid)
        if owner is None:
            continue  # exited since NVML listed it, or unreadable (counted in errors)
        use = uses.setdefault(owner.id, [0, None, None])
        if owner.kind == "kubernetes" and owner.container_id:
            name = pods.container_name(owner.pod_uid, owner.container_id) if pods is not None else None
            containers.setdefault(owner.id, {})[owner.container_id] = name or ""
        use[0] += 1
        if process.used_memory_bytes is not None:
            use[1] = (use[1] or 0.0) + process.used_memory_bytes
        share = gpu.process_sm.get(process.pid)
        if share is not None:
            use[2] = (use[2] or 0.0) + share
    return tuple(OwnerUse(owner, n, memory, None if sm is None else min(1.0, sm),
                          tuple(sorted(containers.get(owner, {}).items())))
                 for owner, (n, memory, sm) in sorted(uses.items()))


def _owner_states(report: ActivityReport) -> dict[str, OwnerState]:
    return {
        owner_id: OwnerState(
            labels=a.owner.labels(), processes=a.processes, threads=a.threads, running=a.running,
            blocked=a.blocked, sleeping=a.sleeping, other=a.other,
            cpu_seconds_total=report.cpu_seconds_total.get(owner_id, 0.0),
            cpus=len(a.cpus), running_cpus=len(a.running_cpus), read_bytes=a.read_bytes,
        )
        for owner_id, a in sorted(report.owners.items())
    }


def make_fast(settings: Settings) -> GpuSource:
    return GpuSource(HostPaths.from_settings(settings), settings)


def make_slow(settings: Settings) -> GpuDeviceSource:
    return GpuDeviceSource(HostPaths.from_settings(settings), settings)

