"""One node: its cores, cgroups, owners and processes, disks, mounts, NICs, RDMA ports and
GPUs, stepped together."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Generator

from evaluation.model.cpu import Cgroup, CpuNode, Thread
from evaluation.model.gpu import Gpu, GpuSpec
from evaluation.model.network import Nic, RdmaPort
from evaluation.model.rng import stream
from evaluation.model.storage import Disk, NfsMount

DT = 0.01
USER_HZ = 100


class Process:
    def __init__(self, pid: int, comm: str, cgroup: Cgroup, owner: "Owner | None", starttime: int,
                 parent: "Process | None" = None) -> None:
        self.pid = pid
        self.comm = comm
        self.cgroup = cgroup
        self.owner = owner
        self.starttime = starttime
        self.parent = parent
        self.threads: list[Thread] = []
        self.children: list[Process] = []
        #: CPU time its threads used before the model started (the process ran before)
        self.cpu_before = 0.0
        if parent is not None:
            parent.children.append(self)

    def tree(self) -> list["Process"]:
        out = [self]
        for c in self.children:
            out.extend(c.tree())
        return out


class Owner:
    """The unit that owns GPU processes, as gpuwait names it: a pod, a Slurm job, a
    container, a systemd unit or session, or the host."""

    def __init__(self, kind: str, ident: str, cgroup: Cgroup, labels: dict[str, str]) -> None:
        self.kind = kind
        self.id = ident
        self.cgroup = cgroup
        self.labels = labels
        #: processes holding a GPU context
        self.gpu_processes: list[Process] = []

    def processes(self) -> list[Process]:
        seen = []
        for p in self.gpu_processes:
            for q in p.tree():
                if q not in seen:
                    seen.append(q)
        return seen


def _labels(owner: str, kind: str, **extra: str) -> dict[str, str]:
    labels = dict.fromkeys(("owner", "owner_kind", "namespace", "pod", "pod_uid", "container_id", "slurm_job",
                            "slurm_uid", "unit"), "")
    labels.update(owner=owner, owner_kind=kind, **extra)
    return labels


class Node:
    def __init__(self, hostname: str, cores: int, seed: int, uptime: float = 302_400.0) -> None:
        self.hostname = hostname
        self.seed = seed
        self.uptime0 = uptime
        self.t = 0.0
        self.dt = DT
        self.root = Cgroup("/")
        self.cpu = CpuNode(cores, uptime, self.root, stream(seed, "cpu"))
        self.disks: list[Disk] = []
        self.mounts: list[NfsMount] = []
        self.nics: list[Nic] = []
        self.ports: list[RdmaPort] = []
        self.gpus: list[Gpu] = []
        self.owners: list[Owner] = []
        self.processes: list[Process] = []
        self.jobs: list = []
        self.actors: list[Generator] = []
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._pid = 3100
        self._rng = stream(seed, hostname, "node")
        #: NIC -> the core its receive interrupts land on
        self.irq_core: dict[str, int] = {}

    # -- time ------------------------------------------------------------------------------
    def now(self) -> float:
        return self.t

    def at(self, t: float, action: Callable[[], None]) -> None:
        self._events.append((t, len(self._events), action))
        self._events.sort()

    def step(self) -> None:
        t, dt = self.t, self.dt
        while self._events and self._events[0][0] <= t + 1e-9:
            self._events.pop(0)[2]()
        for nic in self.nics:
            if nic.softirq_seconds > 0:
                self.cpu.add_softirq(self.irq_core.get(nic.name, 0), nic.softirq_seconds)
                nic.softirq_seconds = 0.0
        for actor in self.actors:
            next(actor)
        self.cpu.step(t, dt)
        for d in self.disks:
            d.step(t, dt)
        for m in self.mounts:
            m.step(t, dt)
        for g in self.gpus:
            g.step(t, dt)
        for job in self.jobs:
            job.step(t, dt)
        for nic in self.nics:
            nic.end_step()
        self.t = round(t + dt, 9)

    def spawn(self, actor: Generator) -> None:
        self.actors.append(actor)

    # -- parts -----------------------------------------------------------------------------
    def stream(self, *names: object):
        return stream(self.seed, self.hostname, *names)

    def add_gpus(self, spec: GpuSpec, count: int, **kw) -> list[Gpu]:
        out = []
        for i in range(count):
            rng = self.stream("gpu", i)
            uid = uuidlib.UUID(int=rng.getrandbits(128), version=4)
            bus = 0x18 + 0x10 * i if i < 4 else 0x98 + 0x10 * (i - 4)
            g = Gpu(len(self.gpus), spec, f"GPU-{uid}", f"00000000:{bus:02x}:00.0", 0 if i < count / 2 else 1, rng,
                    self.uptime0, **kw)
            self.gpus.append(g)
            out.append(g)
        return out

    def add_disk(self, name: str, major: int, minor: int, **limits) -> Disk:
        d = Disk(name, major, minor, rng=self.stream("disk", name), uptime=self.uptime0, **limits)
        self.disks.append(d)
        return d

    def add_nic(self, name: str, rate_bytes: float, mtu: int = 9000, irq_core: int = 0) -> Nic:
        n = Nic(name, rate_bytes, mtu, self.stream("nic", name), self.uptime0)
        self.nics.append(n)
        self.irq_core[name] = irq_core
        return n

    def add_mount(self, mountpoint: str, export: str, nic: Nic, service: dict[str, float], version: str = "4.2") -> NfsMount:
        m = NfsMount(mountpoint, export, nic, service, self.stream("nfs", mountpoint), version)
        self.mounts.append(m)
        return m

    def add_ports(self, count: int, link_layer: str, rate_bytes: float, first: int = 0) -> list[RdmaPort]:
        out = []
        for i in range(count):
            dev = f"mlx5_{first + i}"
            netdev = f"ens{10 + i}f0np0"
            bus = 0x1a + 0x10 * i if i < count / 2 else 0x9a + 0x10 * (i - count // 2)
            p = RdmaPort(dev, link_layer, rate_bytes, f"0000:{bus:02x}:00.0", 0 if i < count / 2 else 1, netdev,
                         self.stream("rdma", dev), self.uptime0)
            self.ports.append(p)
            out.append(p)
            if link_layer == "Ethernet":
                # A RoCE port is also a netdev, listed in /proc/net/dev; the RDMA traffic the
                # port carries bypasses the kernel's stack and is not counted there.
                self.add_nic(netdev, rate_bytes, mtu=9000, irq_core=i % self.cpu.n)
        return out

    # -- owners and processes --------------------------------------------------------------
    def cgroup(self, path: str, quota_cores: float | None = None, parent: Cgroup | None = None) -> Cgroup:
        g = Cgroup(path, parent or self.root, quota_cores, phase=self._rng.uniform(0, 0.1))
        self.cpu.add_group(g)
        return g

    def pod(self, quota_cores: float | None = None, namespace: str = "ml", name: str = "trainer-0",
            qos: str = "burstable") -> Owner:
        uid = str(uuidlib.UUID(int=self._rng.getrandbits(128), version=4))
        slug = uid.replace("-", "_")
        tier = "" if qos == "guaranteed" else f"kubepods-{qos}.slice/"
        prefix = "kubepods" if qos == "guaranteed" else f"kubepods-{qos}"
        path = f"/kubepods.slice/{tier}{prefix}-pod{slug}.slice"
        g = self.cgroup(path, quota_cores)
        owner = Owner("kubernetes", f"kubernetes:{uid}", g,
                      _labels(f"kubernetes:{uid}", "kubernetes", namespace=namespace, pod=name, pod_uid=uid))
        self.owners.append(owner)
        return owner

    def slurm_job(self, job: int, quota_cores: float | None = None) -> Owner:
        g = self.cgroup(f"/system.slice/slurmstepd.scope/job_{job}", quota_cores)
        owner = Owner("slurm", f"slurm:{job}", g, _labels(f"slurm:{job}", "slurm", slurm_job=str(job)))
        self.owners.append(owner)
        return owner

    def container(self, quota_cores: float | None = None) -> Owner:
        cid = "%064x" % self._rng.getrandbits(256)
        g = self.cgroup(f"/system.slice/docker-{cid}.scope", quota_cores)
        owner = Owner("container", f"container:{cid}", g, _labels(f"container:{cid}", "container", container_id=cid))
        self.owners.append(owner)
        return owner

    def systemd_unit(self, unit: str, slice_path: str = "/system.slice", quota_cores: float | None = None) -> Owner:
        path = f"{slice_path}/{unit}"
        g = self.cgroup(path, quota_cores)
        owner = Owner("systemd", f"systemd:{path}", g, _labels(f"systemd:{path}", "systemd", unit=unit))
        self.owners.append(owner)
        return owner

    def process(self, comm: str, cgroup: Cgroup, owner: Owner | None = None, parent: Process | None = None,
                cpu_before: float = 0.0) -> Process:
        self._pid += self._rng.randint(1, 40)
        starttime = int((self.uptime0 - self._rng.uniform(600, 20000)) * USER_HZ)
        p = Process(self._pid, comm, cgroup, owner, starttime, parent)
        p.cpu_before = cpu_before
        self.processes.append(p)
        return p

    def thread(self, process: Process, name: str, allowed=None) -> Thread:
        th = Thread(name, process.cgroup, allowed, process)
        process.threads.append(th)
        self.cpu.add_thread(th)
        return th

    def idle_threads(self, process: Process, count: int) -> None:
        """Threads that exist but sleep (CUDA driver threads, Python helper threads)."""
        for i in range(count):
            self.thread(process, f"{process.comm}-idle{i}")
