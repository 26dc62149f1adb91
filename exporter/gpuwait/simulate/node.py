"""A simulated node: integrates a scenario's rates into the counters each source reads, and
builds the same payloads the real sources return, so everything downstream — window rings,
statistics, the verdict, the exposition, traces — cannot tell it from a real host."""

from __future__ import annotations

import random
import threading
from collections import defaultdict, deque
from collections.abc import Callable

from gpuwait.client import format_record
from gpuwait.collectors.cgroup.payload import OwnerCgroup, OwnerCgroupData
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.collectors.diskstats.payload import DiskCounters, Diskstats
from gpuwait.collectors.gpu.payload import GpuDevice, GpuDeviceData, GpuFastData, GpuTick, OwnerState, OwnerUse
from gpuwait.collectors.netdev.payload import InterfaceCounters, NetDev
from gpuwait.collectors.nccl.source import DUMP_DIR
from gpuwait.collectors.nfs.payload import ByteCounters, NfsData, NfsMountData, OpCounters
from gpuwait.collectors.nfs.source import METADATA_OPS
from gpuwait.collectors.pressure.payload import PressureData
from gpuwait.collectors.rdma.payload import (
    PortTraffic,
    RdmaData,
    RdmaDeviceData,
    RdmaPortData,
    RdmaTrafficData,
)
from gpuwait.collectors.workload.parse import parse_record
from gpuwait.collectors.workload.payload import OwnedRecord, WorkloadData
from gpuwait.core.errors import NoData
from gpuwait.core.reading import Reading
from gpuwait.nvml.values import DeviceInfo, GpuProcess, Memory, PcieLink
from gpuwait.simulate.model import NodeState, Scenario, noisy

#: Longest stretch integrated with one state: short enough that a 100 ms sample sees the
#: phase edges of a scenario within a few percent.
MAX_STEP = 0.02
#: The driver's utilization sample period: NVML reports the share of the last period in
#: which a kernel ran, stamped at its end (nvmlDeviceGetUtilizationRates; the period is
#: 1/6 s to 1 s by product). GPM metrics likewise average the interval between two samples.
DRIVER_PERIOD = 1.0 / 6.0
#: Activity integrals kept for the driver's averages: a little longer than one period.
_ACTIVITY_HISTORY = 2 * DRIVER_PERIOD
#: Seconds since boot when the simulation starts (counters do not start at zero on a real host).
UPTIME = 86_400.0
RDMA_PORT_STATE = (4, "ACTIVE", 5, "LinkUp")
GPU_MEMORY_TOTAL = 80 * 1024**3
#: The simulated job: on each node one Kubernetes pod, worker <replica> of the training job
#: ml/trainer, owns every GPU through one process per GPU. Each replica is its own pod (its
#: own uid) as on a real cluster; replica 0 is the default.
JOB_NAMESPACE, JOB_POD_PREFIX = "ml", "trainer-worker-"
_POD_UID_PREFIX, _POD_UID_SUFFIX = "5f0c1a2e-7d1b-4a8e-9c3f-", 0x2B6D8E4A1C90


def job_owner(replica: int = 0) -> tuple[str, dict[str, str]]:
    """(owner id, owner info labels) of the simulated job's pod on a node."""
    uid = f"{_POD_UID_PREFIX}{_POD_UID_SUFFIX + replica:012x}"
    return f"kubernetes:{uid}", {
        "owner": f"kubernetes:{uid}", "owner_kind": "kubernetes", "owner_namespace": JOB_NAMESPACE,
        "owner_pod": f"{JOB_POD_PREFIX}{replica}", "pod_uid": uid, "container_id": "", "slurm_job": "",
        "slurm_uid": "", "unit": "",
    }


OWNER, OWNER_LABELS = job_owner()
FIRST_PID = 4242
#: Samples per step reported by the simulated job's loops.
WORKLOAD_BATCH = 32
#: Requests per second each GPU's server accepts in the inference scenario: low load (A13).
WORKLOAD_LOW_REQUEST_RATE = 0.05
#: The loop phase a scenario's idle GPU time falls in (the rest is the loop's own compute).
WORKLOAD_WAIT_PHASE = {"data_pipeline": "data", "storage": "data", "network": "comm", "sync": "comm"}


class SimulatedNode:
    """Thread-safe: in live mode every source thread reads it at its own times."""

    def __init__(self, scenario: Scenario, start: float) -> None:
        self.scenario = scenario
        self.start = start
        self._t = start
        self._lock = threading.Lock()
        self._rng = random.Random(scenario.params.seed)
        self.counters: defaultdict[tuple, float] = defaultdict(float)
        self.state: NodeState = scenario.state(scenario, 0.0)
        # (time, {gpu: (util, sm_active, mem_bw) integrals}) after each integration step.
        self._activity: deque[tuple[float, dict[int, tuple[float, float, float]]]] = deque()
        self.owner, self.owner_labels = job_owner(scenario.params.replica)
        self._seed_counters()

    def _seed_counters(self) -> None:
        for core in range(self.scenario.params.cores):
            self.counters[("cpu", core, "idle")] = UPTIME * 0.9
            self.counters[("cpu", core, "user")] = UPTIME * 0.08
            self.counters[("cpu", core, "system")] = UPTIME * 0.02

    # -- time ------------------------------------------------------------------------------
    def advance(self, t: float) -> NodeState:
        """Integrate up to monotonic time ``t`` and return the state at ``t``."""
        with self._lock:
            while self._t < t:
                step = min(MAX_STEP, t - self._t)
                self._integrate(self.scenario.state(self.scenario, self._t - self.start), step)
                self._t += step
                self._keep_activity()
            self.state = self.scenario.state(self.scenario, t - self.start)
            return self.state

    def _keep_activity(self) -> None:
        c = self.counters
        self._activity.append((self._t, {
            i: (c[("gpu", i, "util_s")], c[("gpu", i, "sm_s")], c[("gpu", i, "mem_s")])
            for i in range(len(self.state.gpus))
        }))
        while len(self._activity) > 2 and self._activity[1][0] <= self._t - _ACTIVITY_HISTORY:
            self._activity.popleft()

    def _activity_at(self, t: float, gpu: int) -> tuple[float, float, float] | None:
        """The activity integrals at ``t``, interpolated between integration steps."""
        history = self._activity
        if not history or t < history[0][0]:
            return None
        for (t0, a0), (t1, a1) in zip(history, list(history)[1:]):
            if t0 <= t <= t1 and gpu in a0 and gpu in a1:
                w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
                return tuple(x + w * (y - x) for x, y in zip(a0[gpu], a1[gpu]))
        last_t, last = history[-1]
        return last.get(gpu) if t >= last_t else None

    def driver_mean(self, t: float, gpu: int, fallback: tuple[float, float, float]) -> tuple[float, float, float]:
        """(utilization, SM activity, memory busy) averaged over the driver's period ending
        at ``t``, as the driver reports them; the instant's state until a period is integrated."""
        end = self._activity_at(t, gpu)
        begin = self._activity_at(t - DRIVER_PERIOD, gpu)
        if end is None or begin is None:
            return fallback
        return tuple((e - b) / DRIVER_PERIOD for e, b in zip(end, begin))

    def elapsed(self, t: float) -> float:
        return t - self.start

    def _rate(self, value: float) -> float:
        return noisy(value, self._rng, self.scenario.params.noise)

    def _integrate(self, s: NodeState, dt: float) -> None:
        c = self.counters
        for core, busy in enumerate(s.core_busy):
            busy = min(1.0, self._rate(busy))
            c[("cpu", core, "user")] += 0.8 * busy * dt
            c[("cpu", core, "system")] += 0.2 * busy * dt
            c[("cpu", core, "idle")] += (1.0 - busy) * dt
        for key, ratio in (
            (("cpu", "some"), s.psi_cpu_some), (("io", "some"), s.psi_io_some),
            (("io", "full"), s.psi_io_full), (("memory", "some"), s.psi_memory_some),
            (("memory", "full"), 0.0),
        ):
            c[("psi",) + key] += min(1.0, self._rate(ratio)) * dt
        for name, d in s.disks.items():
            reads, writes = self._rate(d.read_iops) * dt, self._rate(d.write_iops) * dt
            c[("disk", name, "reads")] += reads
            c[("disk", name, "read_bytes")] += self._rate(d.read_bps) * dt
            c[("disk", name, "read_time")] += reads * d.read_latency
            c[("disk", name, "writes")] += writes
            c[("disk", name, "write_bytes")] += self._rate(d.write_bps) * dt
            c[("disk", name, "write_time")] += writes * d.write_latency
            depth = self._rate(d.queue_depth)
            c[("disk", name, "io_time")] += min(1.0, depth) * dt
            c[("disk", name, "weighted")] += depth * dt
        for name, p in s.nics.items():
            self._port(("nic", name), p, dt, mtu=1500)
        for name, p in s.rdma.items():
            self._port(("rdma", name), p, dt, mtu=4096)
            c[("rdma", name, "ecn")] += self._rate(p.ecn_marked_rate) * dt
            c[("rdma", name, "cnp")] += self._rate(p.cnp_rate) * dt
            c[("rdma", name, "xmit_wait")] += self._rate(p.xmit_wait_rate) * dt
            c[("rdma", name, "retransmit")] += self._rate(p.retransmit_rate) * dt
        for op, o in s.nfs_ops.items():
            ops = self._rate(o.ops_rate) * dt
            c[("nfs", op, "ops")] += ops
            c[("nfs", op, "execute_ms")] += ops * o.latency * 1000.0
            c[("nfs", op, "rtt_ms")] += ops * o.latency * 900.0
            c[("nfs", op, "bytes")] += ops * (131072 if op == "READ" else 200)
        c[("owner", "cpu")] += self._rate(s.owner_cpu_cores) * dt
        if self.scenario.params.workload:
            self._loop_phases(s, dt)
        for i, g in enumerate(s.gpus):
            if g.up:
                c[("gpu", i, "pcie_rx")] += self._rate(g.pcie_rx_bps) * dt
                c[("gpu", i, "pcie_tx")] += self._rate(g.pcie_tx_bps) * dt
                c[("gpu", i, "energy")] += g.power_watts * dt
                c[("gpu", i, "util_s")] += g.util * dt
                c[("gpu", i, "sm_s")] += g.sm_active * dt
                c[("gpu", i, "mem_s")] += g.mem_bw * dt

    def _loop_phases(self, s: NodeState, dt: float) -> None:
        # What the job's loop is doing while its GPU is idle is what the scenario models:
        # waiting for the next batch, in a collective, or in its own (too small) compute.
        inference = "inference" in self.scenario.name
        waiting = WORKLOAD_WAIT_PHASE.get(self.scenario.expected, "compute")
        for i, g in enumerate(s.gpus):
            if g.up and g.has_process:
                if g.util >= 0.5:
                    self.counters[("loop", i, "compute")] += dt
                elif not inference:
                    # An idle inference server waits for requests: time outside its loop.
                    self.counters[("loop", i, waiting)] += dt
                if inference:
                    self.counters[("loop", i, "requests")] += WORKLOAD_LOW_REQUEST_RATE * dt

    def _port(self, key: tuple, p, dt: float, mtu: int) -> None:
        rx, tx = self._rate(p.rx_bps) * dt, self._rate(p.tx_bps) * dt
        self.counters[key + ("rx_bytes",)] += rx
        self.counters[key + ("tx_bytes",)] += tx
        self.counters[key + ("rx_packets",)] += rx / mtu
        self.counters[key + ("tx_packets",)] += tx / mtu

    # -- payloads --------------------------------------------------------------------------
    def cpu(self, t: float) -> CpuData:
        s = self.advance(t)
        c = self.counters
        cores = {
            str(core): {
                "user": round(c[("cpu", core, "user")], 2), "nice": 0.0, "system": round(c[("cpu", core, "system")], 2),
                "idle": round(c[("cpu", core, "idle")], 2), "iowait": 0.0, "irq": 0.0, "softirq": 0.0, "steal": 0.0,
            }
            for core in range(self.scenario.params.cores)
        }
        return CpuData(cores, int(round(s.procs_running)), int(round(s.procs_blocked)))

    def pressure(self, t: float) -> PressureData:
        self.advance(t)
        return PressureData({key[1:]: self.counters[key] for key in list(self.counters) if key[0] == "psi"})

    def diskstats(self, t: float) -> Diskstats:
        s = self.advance(t)
        c = self.counters
        devices = {}
        for name, d in s.disks.items():
            devices[name] = DiskCounters(
                259, len(devices), int(c[("disk", name, "reads")]), 0, int(c[("disk", name, "read_bytes")]) // 512 * 512,
                round(c[("disk", name, "read_time")], 3), int(c[("disk", name, "writes")]), 0,
                int(c[("disk", name, "write_bytes")]) // 512 * 512, round(c[("disk", name, "write_time")], 3),
                int(round(d.queue_depth)), round(c[("disk", name, "io_time")], 3), round(c[("disk", name, "weighted")], 3),
                0, 0, 0, 0.0, 0, 0.0,
            )
        return Diskstats(devices)

    def netdev(self, t: float) -> NetDev:
        s = self.advance(t)
        c = self.counters
        interfaces = {}
        for name in s.nics:
            k = ("nic", name)
            interfaces[name] = InterfaceCounters(
                int(c[k + ("rx_bytes",)]), int(c[k + ("rx_packets",)]), 0, 0, 0, 0, 0, 0,
                int(c[k + ("tx_bytes",)]), int(c[k + ("tx_packets",)]), 0, 0, 0, 0, 0, 0,
            )
        return NetDev(interfaces)

    def rdma_traffic(self, t: float) -> RdmaTrafficData:
        s = self.advance(t)
        c = self.counters
        layer = self.scenario.topology.rdma_link_layer
        return RdmaTrafficData(tuple(
            PortTraffic(name, 1, layer, int(c[("rdma", name, "tx_bytes")]), int(c[("rdma", name, "rx_bytes")]))
            for name in s.rdma
        ))

    def rdma(self, t: float) -> RdmaData:
        s = self.advance(t)
        c = self.counters
        topo = self.scenario.topology
        roce = topo.rdma_link_layer == "Ethernet"
        devices = []
        for i, name in enumerate(s.rdma):
            counters = {
                "symbol_error": 0, "link_downed": 0, "link_error_recovery": 0, "port_rcv_errors": 0,
                "port_xmit_discards": 0, "port_xmit_wait": int(c[("rdma", name, "xmit_wait")]),
                "port_xmit_packets": int(c[("rdma", name, "tx_packets")]),
                "port_rcv_packets": int(c[("rdma", name, "rx_packets")]),
            }
            hw = {}
            if roce:
                hw = {
                    "np_ecn_marked_roce_packets": int(c[("rdma", name, "ecn")]),
                    "np_cnp_sent": int(c[("rdma", name, "cnp")]),
                    "rp_cnp_handled": int(c[("rdma", name, "cnp")]),
                    "rp_cnp_ignored": 0,
                    "out_of_sequence": int(c[("rdma", name, "retransmit")] * 0.8),
                    "local_ack_timeout_err": int(c[("rdma", name, "retransmit")] * 0.2),
                    "packet_seq_err": 0,
                }
            port = RdmaPortData(
                1, topo.rdma_link_layer, f"ens{i + 1}f0np0" if roce else f"ib{i}", *RDMA_PORT_STATE,
                topo.rdma_rate_bps, "4X", "NDR" if not roce else "", counters, hw,
            )
            numa = 0 if i < len(s.rdma) // 2 else 1
            devices.append(RdmaDeviceData(
                name, f"0000:{0x19 + 0x20 * i:02x}:00.0", numa, f"b83f:d203:00{i:02x}:0001",
                "28.39.1002", "MT4129", "MT_0000000838", (port,),
            ))
        return RdmaData(tuple(devices))

    def nfs(self, t: float) -> NfsData:
        s = self.advance(t)
        c = self.counters
        ops = {
            op: OpCounters(
                int(c[("nfs", op, "ops")]), int(c[("nfs", op, "ops")]), 0, int(c[("nfs", op, "ops")] * 200),
                int(c[("nfs", op, "bytes")]), 0, int(c[("nfs", op, "rtt_ms")]), int(c[("nfs", op, "execute_ms")]), 0,
            )
            for op in s.nfs_ops
        }
        read_bytes = int(c[("nfs", "READ", "bytes")])
        mount = NfsMountData(
            "storage01:/datasets", "nfs4", "4.2", "tcp",
            ByteCounters(read_bytes, 0, 0, 0, read_bytes, 0, read_bytes // 4096, 0),
            ops, sum(o.ops for name, o in ops.items() if name in METADATA_OPS), sum(o.ops for o in ops.values()),
        )
        return NfsData({self.scenario.topology.nfs_mount: mount}, 0)

    def uuid(self, index: int) -> str:
        return f"GPU-5e4a1c90-{self.scenario.params.seed:04x}-4a8e-9c3f-00000000{index:04x}"

    def gpu(self, t: float) -> GpuFastData:
        s = self.advance(t)
        c = self.counters
        ticks = []
        row: dict[tuple[str, str, str], float] = {}
        for i, g in enumerate(s.gpus):
            uuid = self.uuid(i)
            if not g.up:
                ticks.append(GpuTick(i, uuid, False))
                continue
            util, sm, mem = self.driver_mean(t, i, (g.util, g.sm_active, g.mem_bw))
            util = min(1.0, self._rate(util))
            sm = min(1.0, self._rate(sm))
            mem = min(1.0, self._rate(mem))
            tx, rx = c[("gpu", i, "pcie_tx")], c[("gpu", i, "pcie_rx")]
            key = (str(i), uuid)
            row.update({
                ("util",) + key: util, ("mem",) + key: mem, ("sm",) + key: sm, ("dram",) + key: mem,
                ("tensor",) + key: sm * 0.7, ("pcie_tx",) + key: tx, ("pcie_rx",) + key: rx,
                ("reasons",) + key: float(g.reasons),
            })
            ticks.append(GpuTick(i, uuid, True, util, mem, 1, tx, rx, g.reasons,
                                 {"sm_active": sm, "dram_active": mem, "tensor_active": sm * 0.7}))
        return GpuFastData(True, "", tuple(ticks), ((0.0, row),) if row else ())

    def gpu_device(self, t: float) -> GpuDeviceData:
        s = self.advance(t)
        c = self.counters
        devices = []
        for i, g in enumerate(s.gpus):
            uuid = self.uuid(i)
            if not g.up:
                devices.append(GpuDevice(i, uuid, False))
                continue
            pid = FIRST_PID + i
            util, _, memory_busy = self.driver_mean(t, i, (g.util, g.sm_active, g.mem_bw))
            devices.append(GpuDevice(
                index=i, uuid=uuid, up=True,
                info=DeviceInfo("NVIDIA H100 80GB HBM3", f"00000000:{0x18 + 0x10 * i:02X}:00.0", 0 if i < 4 else 1,
                                False, True, True, tuple(range(18)), "hopper"),
                memory=Memory(GPU_MEMORY_TOTAL, g.mem_used_bytes, GPU_MEMORY_TOTAL - g.mem_used_bytes, 0.5 * 1024**3),
                utilization=util, memory_busy=memory_busy,
                clocks={"sm": g.sm_clock_hz, "memory": 2.619e9},
                power_watts=g.power_watts, power_limit_watts=700.0, energy_joules=c[("gpu", i, "energy")],
                temperature_celsius=g.temperature_c, violation_seconds={"power": 0.0, "thermal": 0.0},
                pcie=PcieLink(g.link_gen, g.link_width, 5, 16, 5), pcie_replays=0.0,
                processes=(GpuProcess(pid, g.mem_used_bytes),) if g.has_process else (),
                owners=(OwnerUse(self.owner, 1, g.mem_used_bytes, g.util),) if g.has_process else (),
            ))
        running = int(round(s.owner_running_threads))
        blocked = int(round(s.owner_blocked_threads))
        owner = OwnerState(
            dict(self.owner_labels), processes=len(s.gpus) + 4, threads=running + blocked + 40,
            running=running, blocked=blocked, sleeping=40, other=0,
            cpu_seconds_total=round(c[("owner", "cpu")], 2), cpus=8, running_cpus=min(running, 8),
        )
        return GpuDeviceData(True, "", "570.124.06", "12.8", tuple(devices), {}, {self.owner: owner})

    def owner_cgroup(self, t: float) -> OwnerCgroupData:
        """The owner's pod cgroup: the CPU time its processes use, and no CPU quota, pressure
        or IO of its own, since no scenario limits or isolates it."""
        self.advance(t)
        uid = self.owner.split(":", 1)[1].replace("-", "_")
        cgroup = OwnerCgroup(f"/kubepods.slice/kubepods-pod{uid}.slice", 2, round(self.counters[("owner", "cpu")], 2),
                             None, None, None, None, None, None, {}, {})
        return OwnerCgroupData({self.owner: cgroup})

    def workload(self, t: float) -> WorkloadData:
        """The records each GPU's process would write with gpuwait.workload (Params.workload=1),
        encoded and parsed as the exporter reads them from the spool."""
        if not self.scenario.params.workload:
            return WorkloadData()
        self.advance(t)
        kind = "inference" if "inference" in self.scenario.name else "training"
        records = []
        for i, g in enumerate(self.state.gpus):
            if not g.has_process or not g.up:
                continue
            c = self.counters
            if kind == "inference":
                steps = int(c[("loop", i, "requests")])  # one batch per request at this load
            else:
                steps = int(self.elapsed(t) / self.scenario.params.period)
            text = format_record({
                "pid": FIRST_PID + i, "starttime": 1000 + i, "instance": 0, "kind": kind, "rank": i, "job": "-",
                "at": t, "interval": 1.0,
                "data_seconds": c[("loop", i, "data")], "compute_seconds": c[("loop", i, "compute")],
                "comm_seconds": c[("loop", i, "comm")], "steps": steps, "samples": steps * WORKLOAD_BATCH,
                "requests": int(c[("loop", i, "requests")]) if kind == "inference" else 0,
            })
            records.append(OwnedRecord(parse_record(text), self.owner))
        return WorkloadData(tuple(records))

    def nccl(self, t: float) -> None:
        """The simulated jobs run without NCCL Inspector: no dump directory, no data, as on
        a node whose jobs never switched the plugin on."""
        raise NoData(f"unconfigured:{DUMP_DIR.name}", "the simulated jobs run without NCCL Inspector")

    #: source name -> payload builder
    def builders(self) -> dict[str, Callable[[float], object]]:
        return {
            "cpu": self.cpu, "pressure": self.pressure, "diskstats": self.diskstats, "netdev": self.netdev,
            "rdma_traffic": self.rdma_traffic, "rdma": self.rdma, "nfs": self.nfs,
            "gpu": self.gpu, "gpu_device": self.gpu_device, "owner_cgroup": self.owner_cgroup, "workload": self.workload,
            "nccl": self.nccl,
        }

    def reading(self, source: str, t: float) -> Reading:
        """Raises NoData for a source the simulated node has nothing for, as the real one does."""
        return Reading(source, t, self.builders()[source](t))
