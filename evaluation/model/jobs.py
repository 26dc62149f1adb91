"""Training jobs, inference servers and the other tenants of a node.

Training rank, one step (PyTorch DDP, one process per GPU):
  1. the batch: from its DataLoader's workers (worker processes that read and decode, with
     prefetch_factor x num_workers batches outstanding; PyTorch DataLoader docs), from a
     shared pipeline (a single controller feeding all its GPUs), or decoded by the main
     thread itself (num_workers=0); the main thread sleeps on the queue meanwhile;
  2. the host-to-device copy, if the step has one;
  3. forward and backward: the kernels are launched asynchronously and the host thread then
     waits in a CUDA synchronize, spinning on its core: cudaDeviceScheduleAuto spins when
     the process has fewer active contexts than the host has logical CPUs (CUDA Runtime API,
     cudaSetDeviceFlags);
  4. the gradient all-reduce: NCCL's kernel is resident from the moment the rank enters it,
     spinning until every rank has arrived (cupy#3557, nccl#1025), then moves the data; its
     network proxy thread busy-polls meanwhile (nccl#374);
  5. the optimizer step, then the next batch.
Ranks on other nodes are modelled by their arrival at each collective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from evaluation.model.actors import Pipe, Share, compute, wait
from evaluation.model.gpu import Copy, Kernel, Resident
from evaluation.model.rng import lognormal

#: all-reduce bus bandwidth inside one node, bytes/s (NVLink generation by product; an L40S
#: box has no NVLink and reduces over PCIe)
INTRA_NODE_BUSBW = {"hopper": 360e9, "ampere": 230e9, "ada": 20e9}


@dataclass
class Profile:
    """What the step's kernels look like to the GPU (GPM ratios, power intensity 0..1, and
    how much they slow with the clock)."""

    sm: float = 0.85
    occ: float = 0.45
    tensor: float = 0.5
    dram: float = 0.35
    power: float = 0.92
    sens: float = 0.95


class CachedReader:
    """Data already in the page cache: reading costs only the copy, counted in decode."""

    def read(self, th, node, cgroup):
        return
        yield


class DiskReader:
    """``requests`` reads of ``size`` bytes per batch from ``disk``, ``depth`` in flight (1 for
    one file after another), ``miss`` of them not found in the page cache."""

    def __init__(self, disk, requests: int, size: int, depth: int = 1, miss: float = 1.0) -> None:
        self.disk = disk
        self.requests = requests
        self.size = size
        self.depth = depth
        self.miss = miss

    def read(self, th, node, cgroup):
        n = int(round(self.requests * self.miss))
        if n <= 0:
            return
        b = self.disk.submit("read", n, self.size, node.t, self.depth, cgroup)
        yield from wait(th, lambda: b.done, "io")


class NfsReader:
    """Per batch, ``units`` repetitions of ``sequence`` ((op, payload)) on ``mount``, ``depth``
    units in flight. A reader waiting for READ data sleeps on the page it needs
    (io_schedule: IO pressure); one waiting for a metadata reply sleeps in the RPC layer
    (rpc_wait_bit_killable: D state, no IO pressure)."""

    def __init__(self, mount, sequence: list[tuple[str, int]], units: int, depth: int = 1) -> None:
        self.mount = mount
        self.sequence = sequence
        self.units = units
        self.depth = depth

    def read(self, th, node, cgroup):
        rpc = self.mount.call(self.sequence, node.t, self.units, self.depth)
        read_share = self._read_share()
        how = "io" if read_share >= 0.5 else "rpc"
        yield from wait(th, lambda: rpc.done, how)

    def _read_share(self) -> float:
        m = self.mount
        total = read = 0.0
        for op, payload in self.sequence:
            s = m.service.get(op, 0.0005) * m.slowdown + (payload / m.nic.rate if op == "READ" else 0.0)
            total += s
            if op == "READ":
                read += s
        return read / total if total else 1.0


@dataclass
class Feed:
    """Where a rank's batches come from."""

    #: "loader" (DataLoader workers per rank), "shared" (one pipeline for all ranks),
    #: "inline" (the main thread decodes), "resident" (data already on the GPU)
    mode: str = "loader"
    workers: int = 4
    prefetch: int = 2
    #: CPU seconds to decode one batch (a global batch for "shared")
    decode: float = 0.3
    decode_cv: float = 0.15
    reader: object = field(default_factory=CachedReader)
    #: cores the workers may run on (None: any)
    affinity: tuple[int, ...] | None = None
    #: workers are threads of the training process (tf.data / Grain style) rather than
    #: child processes (PyTorch DataLoader)
    threads: bool = False


@dataclass
class Fabric:
    """The network a multi-node collective crosses: one RDMA port per GPU (rail-optimized)."""

    ports: list
    #: share of line rate the collective reaches, and its step-to-step spread
    goodput: float = 0.85
    goodput_cv: float = 0.05
    #: share of the traffic's time backed up in the fabric (ECN marks on RoCE, xmit wait on IB)
    congestion: float = 0.01


@dataclass
class Checkpoint:
    interval: float
    bytes_per_rank: float
    disk: object
    first: float = 20.0


class Rank:
    def __init__(self, index: int, gpu, process, main) -> None:
        self.index = index
        self.gpu = gpu
        self.process = process
        self.main = main
        self.proxy = None
        self.pipe: Pipe | None = None
        self.phase = "start"
        self.in_network = False
        self.resident: Resident | None = None
        self.steps = 0
        self.samples = 0
        self.time = {}
        #: model time of this rank's next checkpoint (None: not scheduled yet)
        self.next_checkpoint: float | None = None
        #: NCCL Inspector records: (end time, exec seconds, message bytes, sequence number)
        self.collectives: list[tuple[float, float, float, int]] = []


class TrainingJob:
    def __init__(self, node, owner, gpus, *, name: str, compute: float, compute_cv: float = 0.03,
                 profile: Profile | None = None, feed: Feed | None = None, samples_per_step: int = 256,
                 h2d_bytes: float = 0.0, h2d_pinned: bool = True, grad_bytes: float = 0.0, nodes: int = 1,
                 fabric: Fabric | None = None, channels: int = 16, host_staged: bool = False,
                 straggler: dict | None = None, checkpoint: Checkpoint | None = None, optimizer: float = 0.04,
                 instrumented: bool = False, comm_marked: bool = False, inspector: bool = False,
                 single_process: bool = False, cpu_before: float = 3600.0, idle_threads: int = 10,
                 comm_id: str | None = None, host_wait: str = "spin") -> None:
        self.node = node
        self.owner = owner
        self.gpus = gpus
        self.name = name
        self.compute_mean = compute
        self.compute_cv = compute_cv
        self.profile = profile or Profile()
        self.feed = feed or Feed(mode="resident")
        self.samples_per_step = samples_per_step
        self.h2d_bytes = h2d_bytes
        self.h2d_pinned = h2d_pinned
        self.grad_bytes = grad_bytes
        self.nodes = nodes
        self.fabric = fabric
        self.channels = channels
        self.host_staged = host_staged
        self.straggler = straggler or {}
        self.checkpoint = checkpoint
        self.optimizer = optimizer
        self.instrumented = instrumented
        self.comm_marked = comm_marked
        self.inspector = inspector
        #: how the host thread waits for the GPU: "spin" (CUDA's default with fewer contexts
        #: than CPUs) or "sleep" (cudaDeviceScheduleBlockingSync, or a runtime that waits on events)
        self.host_wait = host_wait
        self.rng = node.stream("job", name)
        self.comm_id = comm_id or "%016x" % self.rng.getrandbits(64)
        self.ranks: list[Rank] = []
        self.transfers: list[tuple[float, float, float, float]] = []  # (start, end, bytes per rank over the NIC, nvlink bytes)
        self._arrived: dict[int, dict[int, float]] = {}
        self.release: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.prev_end = 0.0
        self.seq = 1000 + self.rng.randint(0, 5000)
        self.paused = False
        self.hung_after: float | None = None
        node.jobs.append(self)
        self._build(single_process, cpu_before, idle_threads)

    # -- set-up ----------------------------------------------------------------------------
    def _build(self, single_process: bool, cpu_before: float, idle_threads: int) -> None:
        node, owner = self.node, self.owner
        feed = self.feed
        shared_proc = None
        if single_process:
            shared_proc = node.process("python3", owner.cgroup, owner, cpu_before=cpu_before * len(self.gpus))
            owner.gpu_processes.append(shared_proc)
            node.idle_threads(shared_proc, idle_threads)
        self.share = None
        if feed.mode == "shared":
            self.share = Share(feed.prefetch * feed.workers, len(self.gpus))
            host = shared_proc
            if host is None:
                host = node.process("python3", owner.cgroup, owner, cpu_before=cpu_before)
            for w in range(feed.workers):
                if feed.threads:
                    th = node.thread(host, f"worker{w}", feed.affinity)
                else:
                    wp = node.process("pt_data_worker", owner.cgroup, owner, parent=host, cpu_before=cpu_before / 4)
                    th = node.thread(wp, f"worker{w}", feed.affinity)
                node.spawn(self._worker(th, self.share.pipe, f"shared{w}"))
        for i, gpu in enumerate(self.gpus):
            if shared_proc is not None:
                proc = shared_proc
            else:
                proc = node.process("python3", owner.cgroup, owner, cpu_before=cpu_before)
                owner.gpu_processes.append(proc)
                node.idle_threads(proc, idle_threads)
            gpu.processes[proc.pid] = gpu.processes.get(proc.pid, 0.0) + 0.7 * gpu.spec.memory_bytes
            main = node.thread(proc, f"rank{i}")
            r = Rank(i, gpu, proc, main)
            if self.nodes > 1 or self.host_staged:
                r.proxy = node.thread(proc, "progress" if self.host_staged else "nccl-proxy")
                node.spawn(self._proxy(r))
            if feed.mode == "loader":
                r.pipe = Pipe(feed.prefetch * feed.workers)
                for w in range(feed.workers):
                    if feed.threads:
                        th = node.thread(proc, f"worker{i}.{w}", feed.affinity)
                    else:
                        wp = node.process("pt_data_worker", owner.cgroup, owner, parent=proc, cpu_before=cpu_before / 4)
                        th = node.thread(wp, f"worker{i}.{w}", feed.affinity)
                    node.spawn(self._worker(th, r.pipe, f"{i}.{w}"))
            self.ranks.append(r)
            node.spawn(self._rank(r))

    # -- actors ----------------------------------------------------------------------------
    def _worker(self, th, pipe: Pipe, label: str):
        node, feed = self.node, self.feed
        rng = node.stream("worker", self.name, label)
        dt = node.dt
        while True:
            yield from wait(th, pipe.can_start, "sleep")
            pipe.start()
            yield from feed.reader.read(th, node, self.owner.cgroup)
            yield from compute(th, lognormal(rng, feed.decode, feed.decode_cv), dt)
            pipe.finish()

    def _proxy(self, r: Rank):
        while True:
            yield from wait(r.proxy, lambda: r.in_network, "sleep")
            yield from wait(r.proxy, lambda: not r.in_network, "spin")

    def compute_time(self, rank: int) -> float:
        base = lognormal(self.rng, self.compute_mean, self.compute_cv)
        s = self.straggler
        if s and s.get("rank") == rank and self.node.t >= s.get("from", 0.0):
            base *= s["factor"](self.rng)
        return base

    def _rank(self, r: Rank):
        node, gpu, main, feed = self.node, r.gpu, r.main, self.feed
        dt = node.dt
        p = self.profile
        rng = node.stream("rank", self.name, r.index)
        step = 0
        while True:
            while self.paused:
                r.phase = "idle"
                main.sleep()
                yield
            # 1. the batch
            r.phase = "data"
            if feed.mode == "loader":
                yield from wait(main, r.pipe.has_ready, "sleep")
                r.pipe.take()
            elif feed.mode == "shared":
                yield from wait(main, lambda: self.share.has_ready_for(r.index), "sleep")
                self.share.take(r.index)
            elif feed.mode == "inline":
                yield from feed.reader.read(main, node, self.owner.cgroup)
                yield from compute(main, lognormal(rng, feed.decode, feed.decode_cv), dt)
            # 2. host to device
            hw = self.host_wait
            work = self.compute_time(r.index)
            if self.h2d_bytes:
                r.phase = "copy"
                c = gpu.copy(Copy(self.h2d_bytes, "h2d", self.h2d_pinned))
                # The forward pass starts as the copy ends: the host returns from the copy and
                # launches within microseconds, far inside one model step, so it is queued
                # behind the copy here rather than at the step the host sees the copy done.
                k = gpu.launch(Kernel(work, p.sm, p.occ, p.tensor, p.dram, p.power, p.sens, after=c))
                # a copy from pageable memory keeps the host thread busy staging it
                yield from wait(main, lambda: c.done, "spin" if not self.h2d_pinned else hw)
            else:
                k = gpu.launch(Kernel(work, p.sm, p.occ, p.tensor, p.dram, p.power, p.sens))
            # 3. forward and backward
            r.phase = "compute"
            exchange = self.grad_bytes and (self.host_staged or len(self.ranks) > 1 or self.nodes > 1)
            if exchange:
                yield from wait(main, lambda: k.done, hw)
            # 4. gradients
            if exchange and self.host_staged:
                yield from self._host_staged_allreduce(r, step)
            elif exchange:
                yield from self._allreduce(r, step)
            # 5. optimizer: queued behind the backward kernels when nothing is exchanged, as
            # the framework launches asynchronously; the step ends in one synchronize
            r.phase = "compute"
            k = gpu.launch(Kernel(self.compute_mean * self.optimizer, 0.6, 0.3, 0.05, 0.7, 0.6, 0.4))
            yield from wait(main, lambda: k.done, hw)
            r.steps += 1
            r.samples += self.samples_per_step
            step += 1
            ck = self.checkpoint
            if ck is not None:
                if r.next_checkpoint is None:
                    r.next_checkpoint = ck.first
                if node.t >= r.next_checkpoint:
                    yield from self._checkpoint(r)
                    r.next_checkpoint += ck.interval

    def _allreduce(self, r: Rank, step: int):
        node, gpu, main = self.node, r.gpu, r.main
        r.phase = "peer"
        start = node.t
        r.resident = gpu.reside(Resident(start, self.channels / gpu.spec.sms, 0.02, 0.22))
        r.in_network = self.nodes > 1
        self._arrive(step, r.index, start)
        yield from wait(main, lambda: step in self.release and node.t >= self.release[step] - 1e-9, self.host_wait)
        r.phase = "comm"
        end = self.end[step]
        yield from wait(main, lambda: node.t >= end - 1e-9, self.host_wait)
        r.in_network = False
        self.seq_done(r, step, start, end)

    def _host_staged_allreduce(self, r: Rank, step: int):
        """Gradients through host memory (no GPUDirect): copy down, all-reduce on the CPU side
        over the NIC with the MPI progress engine polling, copy back up. The GPU runs no
        kernel meanwhile."""
        node, gpu, main = self.node, r.gpu, r.main
        r.phase = "copy"
        c = gpu.copy(Copy(self.grad_bytes, "d2h", True))
        yield from wait(main, lambda: c.done, "spin")
        r.phase = "peer"
        r.in_network = True
        self._arrive(step, r.index, node.t)
        yield from wait(main, lambda: step in self.release and node.t >= self.release[step] - 1e-9, "spin")
        r.phase = "comm"
        end = self.end[step]
        yield from wait(main, lambda: node.t >= end - 1e-9, "spin")
        r.in_network = False
        r.phase = "copy"
        c = gpu.copy(Copy(self.grad_bytes, "h2d", True))
        yield from wait(main, lambda: c.done, "spin")

    def _checkpoint(self, r: Rank):
        """torch.save of the rank's shard from the main thread: device to host, serialise,
        write through the page cache under dirty throttling (the writer sleeps in
        balance_dirty_pages, counted as IO wait)."""
        node, gpu, main = self.node, r.gpu, r.main
        ck = self.checkpoint
        r.phase = "checkpoint"
        c = gpu.copy(Copy(ck.bytes_per_rank, "d2h", True))
        yield from wait(main, lambda: c.done, "spin")
        chunk = 64 * 2**20
        left = ck.bytes_per_rank
        while left > 0:
            n = min(left, 16 * chunk)
            yield from compute(main, n / 2.5e9, node.dt)
            b = ck.disk.submit("write", int(math.ceil(n / 2**20)), 2**20, node.t, 16, self.owner.cgroup)
            yield from wait(main, lambda: b.done, "io")
            left -= n

    # -- the collective ----------------------------------------------------------------------
    def _arrive(self, step: int, rank: int, t: float) -> None:
        arrived = self._arrived.setdefault(step, {})
        arrived[rank] = t
        if len(arrived) < len(self.ranks):
            return
        if self.hung_after is not None and t >= self.hung_after:
            # a rank elsewhere never arrives: the collective does not complete
            self.release[step] = math.inf
            self.end[step] = math.inf
            del self._arrived[step]
            return
        remote = self.remote_arrival(step) if self.nodes > 1 else 0.0
        release = max(max(arrived.values()), remote)
        duration, net_bytes, nvl_bytes = self.transfer(step)
        end = release + duration
        self.release[step] = release
        self.end[step] = end
        self.transfers.append((release, end, net_bytes, nvl_bytes))
        for r in self.ranks:
            if r.resident is not None and not self.host_staged:
                r.resident.end = end
        self.prev_end = end
        del self._arrived[step]

    def remote_arrival(self, step: int) -> float:
        """When the slowest rank on the other nodes enters the collective: after the previous
        collective, its optimizer step and its own forward/backward."""
        slowest = max(lognormal(self.rng, self.compute_mean, self.compute_cv) for _ in range(min(8, self.nodes - 1)))
        return self.prev_end + self.compute_mean * self.optimizer + slowest

    def transfer(self, step: int) -> tuple[float, float, float]:
        n_local = len(self.ranks)
        n_total = n_local * self.nodes
        s = self.grad_bytes
        arch = self.gpus[0].spec.architecture
        intra_bytes = s * 2 * (n_local - 1) / n_local if n_local > 1 else 0.0
        intra = intra_bytes / INTRA_NODE_BUSBW[arch]
        net_bytes = 0.0
        inter = 0.0
        if self.nodes > 1 and self.fabric is not None:
            net_bytes = s * 2 * (n_total - 1) / n_total
            f = self.fabric
            sharing = math.ceil(n_local / len(f.ports))
            rate = f.ports[0].rate * min(0.98, lognormal(self.rng, f.goodput, f.goodput_cv)) / sharing
            inter = net_bytes / rate
        return max(intra, inter) + 40e-6 * math.log2(max(2, n_total)), net_bytes, intra_bytes

    def seq_done(self, r: Rank, step: int, start: float, end: float) -> None:
        if self.inspector:
            r.collectives.append((end, end - start, self.grad_bytes, self.seq + step))

    # -- per step: link traffic and the phase budget ------------------------------------------
    def step(self, t: float, dt: float) -> None:
        keep = []
        for start, end, net_bytes, nvl_bytes in self.transfers:
            lo, hi = max(t, start), min(t + dt, end)
            if hi > lo and end > start:
                share = (hi - lo) / (end - start)
                for r in self.ranks:
                    if self.fabric is not None and net_bytes:
                        port = self.fabric.ports[r.index * len(self.fabric.ports) // len(self.ranks)]
                        port.carry(net_bytes * share, net_bytes * share, dt, self.fabric.congestion)
                    if nvl_bytes and not self.host_staged:
                        r.gpu.nvlink_traffic(nvl_bytes * share)
            if end > t + dt:
                keep.append((start, end, net_bytes, nvl_bytes))
        self.transfers = keep
        for r in self.ranks:
            r.time[r.phase] = r.time.get(r.phase, 0.0) + dt

    def workload_counters(self, r: Rank) -> dict:
        total = sum(r.time.values())
        data = r.time.get("data", 0.0)
        comm = (r.time.get("peer", 0.0) + r.time.get("comm", 0.0)) if self.comm_marked else 0.0
        return {"data_seconds": data, "compute_seconds": max(0.0, total - data - comm), "comm_seconds": comm,
                "steps": r.steps, "samples": r.samples, "requests": 0}


class InferenceServer:
    """One replica: requests arrive as a Poisson process; a server thread takes them one at
    a time, runs the host side (tokenising, launching the kernels), waits for the GPU
    (spinning, as CUDA's default policy does) and answers."""

    def __init__(self, node, owner, gpu, *, name: str, rate: float, cpu_per_request: float, gpu_per_request: float,
                 profile: Profile | None = None, instrumented: bool = False, cpu_before: float = 7200.0,
                 memory_share: float = 0.5) -> None:
        self.node = node
        self.owner = owner
        self.gpu = gpu
        self.name = name
        self.rate = rate
        self.cpu_per_request = cpu_per_request
        self.gpu_per_request = gpu_per_request
        self.profile = profile or Profile(sm=0.6, occ=0.3, tensor=0.3, dram=0.5, power=0.7, sens=0.7)
        self.instrumented = instrumented
        self.rng = node.stream("inference", name)
        self.queue: list[float] = []
        self.requests = 0
        self.busy_time = 0.0
        self.time: dict[str, float] = {}
        self.phase = "idle"
        proc = node.process("tritonserver" if rate > 20 else "python3", owner.cgroup, owner, cpu_before=cpu_before)
        owner.gpu_processes.append(proc)
        node.idle_threads(proc, 12)
        gpu.processes[proc.pid] = memory_share * gpu.spec.memory_bytes
        self.process = proc
        self.thread = node.thread(proc, f"{name}-server")
        node.spawn(self._arrivals())
        node.spawn(self._serve())
        node.jobs.append(self)

    def _arrivals(self):
        node = self.node
        while True:
            lam = self.rate * node.dt
            # Poisson count for this step (Knuth: the rates here are small per step)
            k, p, limit = 0, 1.0, math.exp(-lam)
            while True:
                p *= self.rng.random()
                if p <= limit:
                    break
                k += 1
            self.queue.extend([node.t] * k)
            yield

    def _serve(self):
        """Requests are short next to a model step: the thread works through as many as its
        CPU time allows within a step, each request's kernels launched once its host part is
        done, and spins while kernels it launched are still running."""
        node, th, gpu, p = self.node, self.thread, self.gpu, self.profile
        dt = node.dt
        pending: list[float] = []  # host CPU still needed by each accepted request
        launched: list[Kernel] = []
        while True:
            budget = th.got
            while pending and budget > 0:
                use = min(budget, pending[0])
                pending[0] -= use
                budget -= use
                if pending[0] <= 1e-12:
                    pending.pop(0)
                    launched.append(gpu.launch(Kernel(lognormal(self.rng, self.gpu_per_request, 0.2), p.sm, p.occ,
                                                      p.tensor, p.dram, p.power, p.sens, tag="request")))
                    self.requests += 1
            while self.queue:
                self.queue.pop(0)
                pending.append(lognormal(self.rng, self.cpu_per_request, 0.2))
            launched = [k for k in launched if not k.done]
            # A synchronize spins until the kernels it waits for end (cudaStreamSynchronize
            # returns when the stream's work completes), not to the end of the step.
            spin = sum(k.left for k in launched)
            if pending:
                self.phase = "launch"
                th.run(min(1.0, (sum(pending) + spin) / dt))
            elif launched:
                self.phase = "compute"
                th.run(min(1.0, spin / dt))  # spinning in the synchronize
            else:
                self.phase = "idle"
                th.sleep()
            yield

    def step(self, t: float, dt: float) -> None:
        self.time[self.phase] = self.time.get(self.phase, 0.0) + dt


# -- tenants: work on the host that owns no GPU --------------------------------------------------

def compile_job(node, cgroup, jobs: int, name: str = "make"):
    """A parallel build (make -j): each compiler process is CPU-bound for a second or two,
    with short pauses to read sources from the page cache and start the next."""
    proc = node.process(name, cgroup)
    rng = node.stream("compile", name)
    for j in range(jobs):
        th = node.thread(proc, f"cc1plus{j}")

        def unit(th=th, j=j):
            while True:
                yield from compute(th, lognormal(rng, 1.6, 0.5), node.dt)
                th.sleep()
                for _ in range(rng.randint(1, 4)):
                    yield
        node.spawn(unit())
    return proc


def backup_agent(node, cgroup, disk, threads: int = 4, chunk: int = 16 * 2**20, depth: int = 4,
                 hash_rate: float = 3.0e9, name: str = "backup-agent"):
    """Reads a volume sequentially in large chunks and hashes them: per stream a reader thread
    keeps ``depth`` chunks in flight (split in 1 MiB requests) and a hashing thread digests
    what has arrived, so the device always has the stream's reads queued."""
    proc = node.process(name, cgroup)
    rng = node.stream("backup", name)
    for i in range(threads):
        reader = node.thread(proc, f"{name}-read{i}")
        hasher = node.thread(proc, f"{name}-hash{i}")
        backlog = [0.0]

        def read(th=reader, backlog=backlog):
            start = node.t + rng.uniform(0, 0.3)
            yield from wait(th, lambda: node.t >= start, "sleep")
            while True:
                n = depth * chunk // 2**20
                b = disk.submit("read", n, 2**20, node.t, n, cgroup)
                yield from wait(th, lambda: b.done, "io")
                backlog[0] += depth * chunk
                # the hasher keeps up with a bounded buffer: wait when it is far behind
                yield from wait(th, lambda: backlog[0] < 4 * depth * chunk, "sleep")

        def digest(th=hasher, backlog=backlog):
            while True:
                yield from wait(th, lambda: backlog[0] > 0, "sleep")
                amount = backlog[0]
                yield from compute(th, amount / hash_rate, node.dt)
                backlog[0] -= amount
        node.spawn(read())
        node.spawn(digest())
    return proc


def log_shipper(node, cgroup, disk, burst_bytes: float, period: float, name: str = "fluent-bit"):
    """Flushes its buffer to disk every ``period`` seconds in one burst of buffered writes,
    sleeping in dirty-page throttling while the device drains it."""
    proc = node.process(name, cgroup)
    th = node.thread(proc, name)

    def loop():
        while True:
            b = disk.submit("write", int(burst_bytes // 2**20), 2**20, node.t, 32, cgroup)
            yield from wait(th, lambda: b.done, "io")
            until = node.t + period
            yield from wait(th, lambda: node.t >= until, "sleep")
    node.spawn(loop())
    return proc


def nfs_tenant(node, cgroup, mount, workers: int, file_bytes: int, depth: int = 4, cpu_per_file: float = 0.02,
               name: str = "etl"):
    """Another job's readers streaming large files from an NFS mount."""
    proc = node.process(name, cgroup)
    rsize = 2**20
    for i in range(workers):
        th = node.thread(proc, f"{name}{i}")

        def loop(th=th):
            while True:
                rpc = mount.call([("READ", rsize)], node.t, file_bytes // rsize, depth)
                yield from wait(th, lambda: rpc.done, "io")
                yield from compute(th, cpu_per_file, node.dt)
        node.spawn(loop())
    return proc


def idle_holder(node, owner, gpus, memory_share: float = 0.3, name: str = "python3"):
    """A process that holds GPU memory and does nothing (a notebook kernel between cells)."""
    proc = node.process(name, owner.cgroup, owner, cpu_before=300.0)
    owner.gpu_processes.append(proc)
    node.idle_threads(proc, 8)
    for g in gpus:
        g.processes[proc.pid] = memory_share * g.spec.memory_bytes
    return proc
