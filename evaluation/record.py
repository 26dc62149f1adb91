"""Reads the model's node the way gpuwait's sources read a real one, and writes the readings
as a trace (docs/trace-format.md) directly as JSON.

Fast sources are read every 100 ms and slow ones every 5 s, each at its own phase within the
interval with sub-millisecond jitter, as independent reader threads would; ``owner_cgroup``
and ``nccl`` every second, where the trace format being written has them (a format is a
version and the sources its reader knows: ``evaluation.exporter.TraceFormat``). The ``gpu``
source hands the driver's
utilization samples over once they are readable (20-30 ms after the end of their period)
and files them, with the values read at the tick itself, into window rows on the
sample-interval grid, stamped relative to the reading. The filing is the exporter's own
(``evaluation.exporter.row_filer``): it is how any recorded trace's rows are made, so a
trace of the model carries them as a trace of a real node would.
"""

from __future__ import annotations

import gzip
import json
import math

from evaluation.exporter import row_filer
from evaluation.model.cpu import PSI_KEYS
from evaluation.model.rng import stream

SAMPLE_INTERVAL = 0.1
SLOW_INTERVAL = 5.0
CGROUP_INTERVAL = 1.0
#: how long after the end of its period a utilization sample can be read
SAMPLE_READABLE_AFTER = (0.02, 0.03)
#: the longest a row waits for late samples
MAX_ROW_HOLD = 1.0
#: wall clock of the model's boot (2026-11-20 08:00:00 UTC), for wall-time fields
BOOT_WALL = 1795161600.0


class Recorder:
    def __init__(self, node, path: str, scenario: str, seed: int, fmt, start: float = 0.0) -> None:
        self.node = node
        self.format = fmt
        self.path = path
        self.rng = stream(seed, "recorder", scenario)
        self.file = gzip.open(path, "wt", encoding="utf-8", compresslevel=5) if path.endswith(".gz") else open(path, "w")
        self.origin: float | None = None
        header = {"format": "gpuwait-trace", "version": fmt.version,
                  "created": "2026-11-24T10:00:00Z", "host": node.hostname,
                  "meta": {"generator": "gpuwait evaluation set", "scenario": scenario, "seed": seed,
                           "sample_interval": SAMPLE_INTERVAL, "slow_interval": SLOW_INTERVAL,
                           "analysis_window": 60.0, "analysis_interval": 1.0}}
        self._write(header)
        phases = {"cpu": 0.011, "pressure": 0.014, "diskstats": 0.017, "netdev": 0.021, "rdma_traffic": 0.026,
                  "gpu": 0.052, "gpu_device": 0.35, "nfs": 0.8, "rdma": 1.3, "workload": 2.1,
                  "owner_cgroup": 0.43, "nccl": 0.61}
        intervals = {"gpu_device": SLOW_INTERVAL, "nfs": SLOW_INTERVAL, "rdma": SLOW_INTERVAL, "workload": SLOW_INTERVAL,
                     "owner_cgroup": CGROUP_INTERVAL, "nccl": CGROUP_INTERVAL}
        sources = ["cpu", "pressure", "diskstats", "netdev", "gpu", "gpu_device", "owner_cgroup"]
        if node.mounts:
            sources.append("nfs")
        if node.ports:
            sources += ["rdma_traffic", "rdma"]
        if any(getattr(j, "instrumented", False) for j in node.jobs):
            sources.append("workload")
        if any(getattr(j, "inspector", False) for j in node.jobs):
            sources.append("nccl")
        self.sources = [s for s in sources if s in fmt.sources]
        self.interval = {s: intervals.get(s, SAMPLE_INTERVAL) for s in self.sources}
        self.next = {s: start + phases[s] for s in self.sources}
        self.slots = row_filer(SAMPLE_INTERVAL)
        self.delivered = {g.index: 0 for g in node.gpus}
        self.newest = {g.index: None for g in node.gpus}
        self.latest = {g.index: [None, None] for g in node.gpus}
        self.nccl_seen: dict[tuple[int, int], int] = {}
        self.lines = 0

    def _write(self, obj) -> None:
        self.file.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")

    def close(self) -> None:
        self.file.close()

    def poll(self) -> None:
        """After a model step: take every reading due by the step's end."""
        now = self.node.t
        due = sorted((self.next[s], s) for s in self.sources if self.next[s] <= now)
        for t_read, source in due:
            jitter = self.rng.uniform(0.0, 0.0008)
            t = t_read + jitter
            data = getattr(self, "_" + source)(t)
            if self.origin is None:
                self.origin = t
            self._write({"t": round(t - self.origin, 6), "source": source, "data": data})
            self.lines += 1
            self.next[source] = t_read + self.interval[source]

    # -- fast ------------------------------------------------------------------------------
    def _cpu(self, t):
        cpu = self.node.cpu
        return {"cores": cpu.proc_stat(), "procs_running": cpu.procs_running + 1, "procs_blocked": cpu.procs_blocked}

    def _pressure(self, t):
        stall = self.node.root.stall
        return {"stalled_seconds": [[list(k), round(stall[k], 6)] for k in PSI_KEYS if k != ("cpu", "full")]}

    def _diskstats(self, t):
        return {"devices": {d.name: d.diskstats() for d in self.node.disks}}

    def _netdev(self, t):
        return {"interfaces": {n.name: n.counters() for n in self.node.nics}}

    def _rdma_traffic(self, t):
        return {"ports": [p.traffic() for p in self.node.ports]}

    def _gpu(self, t):
        ticks = []
        until = t
        for g in self.node.gpus:
            index, uuid = str(g.index), g.uuid
            delay = self.rng.uniform(*SAMPLE_READABLE_AFTER)
            pending = g.samples_since(self.delivered[g.index])
            new = [s for s in pending if s[0] <= t - delay]
            for ts, util, mem in new:
                self.slots.add(ts, ("util", index, uuid), util)
                self.slots.add(ts, ("mem", index, uuid), mem)
            if new:
                self.delivered[g.index] += len(new)
                self.newest[g.index] = new[-1][0]
                self.latest[g.index] = [new[-1][1], new[-1][2]]
            tick = {"index": g.index, "uuid": uuid, "up": True, "utilization": self.latest[g.index][0],
                    "memory_busy": self.latest[g.index][1], "samples": len(new)}
            if g.spec.pcie_counters:
                tick["pcie_tx_bytes"] = round(g.pcie["tx"])
                tick["pcie_rx_bytes"] = round(g.pcie["rx"])
                self.slots.add(t, ("pcie_tx", index, uuid), round(g.pcie["tx"]), last=True)
                self.slots.add(t, ("pcie_rx", index, uuid), round(g.pcie["rx"]), last=True)
            else:
                tick["pcie_tx_bytes"] = None
                tick["pcie_rx_bytes"] = None
            tick["clocks_event_reasons"] = g.reasons
            self.slots.add(t, ("reasons", index, uuid), float(g.reasons), last=True)
            gpm = g.gpm_read()
            if gpm is not None:
                tick["gpm"] = gpm
                for name, signal in (("sm_active", "sm"), ("sm_occupancy", "occ"), ("tensor_active", "tensor"),
                                     ("dram_active", "dram"), ("pcie_tx_bytes_per_second", "gpm_pcie_tx"),
                                     ("pcie_rx_bytes_per_second", "gpm_pcie_rx"),
                                     ("nvlink_tx_bytes_per_second", "gpm_nvl_tx"),
                                     ("nvlink_rx_bytes_per_second", "gpm_nvl_rx")):
                    if name in gpm:
                        self.slots.add(t, (signal, index, uuid), gpm[name])
            ticks.append(tick)
            newest = self.newest[g.index]
            if newest is not None and t - newest <= MAX_ROW_HOLD:
                until = min(until, newest)
        rows = self.slots.flush(max(until, t - MAX_ROW_HOLD))
        return {"backend_up": True, "backend_reason": "", "gpus": ticks,
                "rows": [[round(center - t, 6), [[list(k), round(v, 6)] for k, v in values.items()]] for center, values in rows]}

    # -- slow ------------------------------------------------------------------------------
    def _gpu_device(self, t):
        node = self.node
        gpus = []
        owners_of: dict[int, list] = {g.index: [] for g in node.gpus}
        proc_owner = {}
        for o in node.owners:
            for p in o.gpu_processes:
                proc_owner[p.pid] = o
        for g in node.gpus:
            spec = g.spec
            used = g.memory_used()
            procs = [{"pid": pid, "used_memory_bytes": float(mem)} for pid, mem in sorted(g.processes.items())]
            uses: dict[str, list] = {}
            for pid, mem in sorted(g.processes.items()):
                o = proc_owner.get(pid)
                if o is None:
                    continue
                u = uses.setdefault(o.id, [0, 0.0, 0.0])
                u[0] += 1
                u[1] += mem
                u[2] += g.busy_ema / max(1, len(g.processes))
            owners = [{"owner": oid, "processes": n, "memory_bytes": mem, "utilization": round(min(1.0, sm), 4)}
                      for oid, (n, mem, sm) in sorted(uses.items())]
            owners_of[g.index] = owners
            latest = self.latest[g.index]
            dev = {
                "index": g.index, "uuid": g.uuid, "up": True,
                "info": {"name": spec.name, "pci_bus_id": g.pci_bus_id, "numa_node": g.numa_node, "mig_mode": False,
                         "persistence_mode": True, "gpm_supported": spec.gpm, "nvlink_links": list(range(spec.nvlinks)),
                         "architecture": spec.architecture},
                "memory": {"total": float(spec.memory_bytes), "used": float(used), "free": float(spec.memory_bytes - used),
                           "reserved": float(g.reserved_memory)},
                "utilization": latest[0], "memory_busy": latest[1],
                "clocks": {"sm": g.sm_clock(t), "memory": spec.memory_hz},
                "power_watts": round(g.power, 3), "power_limit_watts": g.power_limit, "energy_joules": round(g.energy, 3),
                "temperature_celsius": float(round(g.temperature)),
                "violation_seconds": {k: round(v, 6) for k, v in g.violation.items()},
                "pcie": {"generation": g.link_generation, "width": g.link_width, "max_generation": spec.pcie_generation,
                         "max_width": spec.pcie_width, "gpu_max_generation": spec.pcie_generation},
                "pcie_replays": float(int(g.pcie_replays)),
                "nvlinks": [{"link": i, "up": True, "tx_bytes": round(c[0]), "rx_bytes": round(c[1]),
                             "errors": {"crc_flit": 0.0, "crc_data": 0.0, "replay": 0.0, "recovery": 0.0}}
                            for i, c in enumerate(g.nvlink)],
                "xids": {},
                "processes": procs,
                "process_sm": {str(p["pid"]): round(g.busy_ema / max(1, len(procs)), 4) for p in procs},
                "peers": {h.uuid: ("NODE" if h.numa_node == g.numa_node else "SYS") for h in node.gpus if h is not g},
                "owners": owners,
                "nics": {p.device: ("PIX" if i == g.index else ("NODE" if p.numa_node == g.numa_node else "SYS"))
                         for i, p in enumerate(node.ports)},
            }
            if not spec.pcie_counters:
                dev["pcie_throughput"] = [round(g.pcie_now[0], 1), round(g.pcie_now[1], 1)]
            gpus.append(dev)
        owners = {}
        for o in node.owners:
            procs = o.processes()
            if not procs:
                continue
            threads = [th for p in procs for th in p.threads]
            states = {"R": 0, "D": 0, "S": 0}
            for th in threads:
                states[th.state] += 1
            owners[o.id] = {
                "labels": dict(o.labels), "processes": len(procs), "threads": len(threads),
                "running": states["R"], "blocked": states["D"], "sleeping": states["S"], "other": 0,
                "cpu_seconds_total": round(sum(p.cpu_before for p in procs) + sum(th.cpu_seconds for th in threads), 2),
                "cpus": len({th.core for th in threads if th.cpu_seconds > 0}),
                "running_cpus": len({th.core for th in threads if th.state == "R"}),
            }
        return {"backend_up": True, "backend_reason": "", "driver_version": "550.90.07", "cuda_version": "12.4",
                "gpus": gpus, "nvml_errors": {}, "owners": owners}

    def _nfs(self, t):
        return {"mounts": {m.mountpoint: m.mountstats() for m in self.node.mounts}, "shadowed": 0}

    def _rdma(self, t):
        return {"devices": [p.details() for p in self.node.ports]}

    def _workload(self, t):
        records = []
        mono0 = self.node.uptime0
        # the loops write their record about once a second: what the exporter reads is the
        # last one written
        for job in self.node.jobs:
            if not getattr(job, "instrumented", False):
                continue
            for rec in job_records(job):
                rec["record"]["at"] = round(mono0 + math.floor(t), 6)
                records.append(rec)
        return {"records": records}

    # -- sources of later format versions ----------------------------------------------------
    def _owner_cgroup(self, t):
        """Each GPU owner's cgroup as cgroup v2 shows it: cpu.stat (usage, and with a quota
        nr_periods, nr_throttled, throttled_usec), cpu.max, the pressure files and io.stat."""
        owners = {}
        for o in self.node.owners:
            if not o.gpu_processes:
                continue
            g = o.cgroup
            limited = g.quota_cores is not None
            owners[o.id] = {
                "path": g.path, "version": 2,
                "cpu_usage_seconds": round(g.usage, 6), "cpu_user_seconds": round(g.user, 6),
                "cpu_system_seconds": round(g.system, 6),
                # cpu.stat has the bandwidth lines only while a quota is set
                "cpu_periods": g.nr_periods if limited else None,
                "cpu_throttled_periods": g.nr_throttled if limited else None,
                "cpu_throttled_seconds": round(g.throttled_seconds, 6) if limited else None,
                "cpu_quota_cores": g.quota_cores,
                "pressure": [[list(k), round(v, 6)] for k, v in g.stall.items()],
                "io": {dev: {"read_bytes": c[0], "write_bytes": c[1], "reads": c[2], "writes": c[3],
                             "discard_bytes": 0, "discards": 0} for dev, c in sorted(g.io.items())},
            }
        devices = {d.key: d.name for d in self.node.disks}
        return {"owners": owners, "devices": devices}

    def _nccl(self, t):
        """What NCCL Inspector wrote since the previous read, per (communicator, rank): one
        record per completed collective, with its kernel_gpu execution time, message size and
        bus bandwidth (NVIDIA/nccl ext-profiler/inspector/README.md)."""
        ranks = []
        node = self.node
        read_unix = BOOT_WALL + t
        for job in node.jobs:
            if not getattr(job, "inspector", False):
                continue
            n_ranks = len(job.ranks) * job.nodes
            bus_factor = 2 * (n_ranks - 1) / n_ranks
            for r in job.ranks:
                key = (id(job), r.index)
                seen = self.nccl_seen.get(key, 0)
                new = [c for c in r.collectives[seen:] if c[0] <= t]
                self.nccl_seen[key] = seen + len(new)
                done = r.collectives[:seen + len(new)]
                last = done[-1] if done else None
                ranks.append({
                    "comm": job.comm_id, "rank": job_rank_offset(job) + r.index, "n_ranks": n_ranks,
                    "n_nodes": job.nodes, "pid": r.process.pid, "hostname": node.hostname, "device": r.gpu.index,
                    "collectives": len(new),
                    "exec_seconds": round(sum(c[1] for c in new), 6),
                    "max_exec_seconds": round(max((c[1] for c in new), default=0.0), 6),
                    "msg_bytes": float(sum(c[2] for c in new)),
                    "bus_bytes": float(sum(c[2] * bus_factor for c in new)),
                    "last_seq": last[3] if last else None,
                    "last_unix": round(BOOT_WALL + last[0], 6) if last else None,
                    "timing_source": "kernel_gpu", "kind": "collective", "comm_name": "",
                    "device_uuid": r.gpu.uuid,
                    "collectives_total": len(done),
                    "exec_seconds_total": round(sum(c[1] for c in done), 6),
                    "msg_bytes_total": float(sum(c[2] for c in done)),
                    "bus_bytes_total": float(sum(c[2] * bus_factor for c in done)),
                })
        record_bytes = 380
        new_records = sum(x["collectives"] for x in ranks)
        total_records = sum(x["collectives_total"] for x in ranks)
        return {"ranks": ranks, "files": len(ranks), "bytes_read": record_bytes * new_records, "malformed": 0,
                "read_unix": round(read_unix, 6), "skipped_bytes": 0, "unsupported": 0,
                "bytes_read_total": record_bytes * total_records, "malformed_total": 0, "skipped_bytes_total": 0,
                "unsupported_total": 0, "evicted_total": 0}


def job_rank_offset(job) -> int:
    """Global rank of this node's first rank: the node is the first of its job's nodes."""
    return 0


def job_records(job) -> list[dict]:
    out = []
    if hasattr(job, "ranks"):
        for r in job.ranks:
            c = job.workload_counters(r)
            out.append({"owner": job.owner.id, "record": {
                "pid": r.process.pid, "starttime": r.process.starttime, "instance": 0, "kind": "training",
                "rank": r.index, "job": job.name, "at": 0.0, "interval": 1.0,
                "data_seconds": round(c["data_seconds"], 6), "compute_seconds": round(c["compute_seconds"], 6),
                "comm_seconds": round(c["comm_seconds"], 6), "steps": c["steps"], "samples": c["samples"],
                "requests": 0}})
    else:
        total = sum(job.time.values())
        idle = job.time.get("idle", 0.0)
        out.append({"owner": job.owner.id, "record": {
            "pid": job.process.pid, "starttime": job.process.starttime, "instance": 0, "kind": "inference",
            "rank": -1, "job": job.name, "at": 0.0, "interval": 1.0,
            # waiting for the next request is outside the loop's phases, as an inference loop
            # marks it (workload.mark(OUTSIDE)): only serving time is counted
            "data_seconds": 0.0, "compute_seconds": round(total - idle, 6), "comm_seconds": 0.0,
            "steps": job.requests, "samples": job.requests, "requests": job.requests}})
    return out
