"""Threads on cores, cgroups with CFS bandwidth quotas, and pressure stall information.

- A thread is runnable (R: it asks for a share of the next step), blocked in the kernel (D)
  or asleep (S). A runnable thread stays on the core it last ran on while that core is free,
  as CFS does with cache-hot tasks; runnable threads beyond the free cores share a core.
- CFS bandwidth control (Documentation/scheduler/sched-bwc.rst): a group may consume at most
  ``quota`` of CPU time per ``period`` (100 ms); once it is spent, its threads are throttled,
  still runnable, until the next period. ``nr_periods`` counts periods in which the group was
  runnable, ``nr_throttled`` those in which it ran out, and ``throttled_usec`` adds up the
  time each CPU's run queue of the group spent throttled (kernel/sched/fair.c accumulates it
  per cfs_rq on unthrottle), so it grows with the number of CPUs the group's threads sit on.
- Idle time of a core on which a thread blocked in IO last ran is iowait, as /proc/stat
  counts it.
- PSI (Documentation/accounting/psi.rst): per CPU, "some" is the share of time at least one
  task was stalled, "full" the share in which no task of the group was productive; the
  per-CPU times are averaged weighted by each CPU's non-idle time, system wide and per
  cgroup. CPU pressure in a cgroup counts runnable tasks that are not on a CPU, throttled
  ones included (kernel commit b05e75d61138, "psi: Fix cpu.pressure for cpu.max and
  competing cgroups": NR_RUNNING > ON_CPU). IO pressure counts tasks waiting in io_schedule();
  a task blocked in an RPC wait (D state, but not in io_schedule, e.g. an NFS LOOKUP) is not
  IO pressure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

PERIOD_SECONDS = 0.1
PSI_KEYS = (("cpu", "some"), ("cpu", "full"), ("io", "some"), ("io", "full"), ("memory", "some"), ("memory", "full"))


class Cgroup:
    """A cgroup v2 directory: CPU accounting (cpu.stat), the quota (cpu.max), pressure
    (cpu/io/memory.pressure) and IO per device (io.stat). ``parent`` is the group whose
    counters include this one's (the root holds everything)."""

    def __init__(self, path: str, parent: "Cgroup | None" = None, quota_cores: float | None = None,
                 period: float = PERIOD_SECONDS, phase: float = 0.0) -> None:
        self.path = path
        self.parent = parent
        self.quota_cores = quota_cores
        self.period = period
        self.phase = phase
        self.usage = 0.0
        self.user = 0.0
        self.system = 0.0
        self.nr_periods = 0
        self.nr_throttled = 0
        self.throttled_seconds = 0.0
        self.runtime_left = 0.0
        self.period_index: int | None = None
        self.period_runnable = False
        self.period_throttled = False
        self.stall = dict.fromkeys(PSI_KEYS, 0.0)
        #: "major:minor" -> [read bytes, write bytes, reads, writes]
        self.io: dict[str, list[int]] = {}
        #: CPU time granted per period, for the physics checks (quota x period at most)
        self.period_usage = 0.0
        self.max_period_usage = 0.0

    def lineage(self) -> tuple["Cgroup", ...]:
        out = []
        g: Cgroup | None = self
        while g is not None:
            out.append(g)
            g = g.parent
        return tuple(out)

    def quota_group(self) -> "Cgroup | None":
        """The nearest group (itself or an ancestor) with a quota: the one that throttles."""
        for g in self.lineage():
            if g.quota_cores is not None:
                return g
        return None

    def account_io(self, device: str, read_bytes: int = 0, write_bytes: int = 0, reads: int = 0, writes: int = 0) -> None:
        for g in self.lineage():
            cell = g.io.setdefault(device, [0, 0, 0, 0])
            cell[0] += read_bytes
            cell[1] += write_bytes
            cell[2] += reads
            cell[3] += writes


class Thread:
    __slots__ = ("name", "cgroup", "groups", "quota_group", "allowed", "core", "state", "want", "mode",
                 "got", "iowait", "cpu_user", "cpu_system", "eff", "process")

    def __init__(self, name: str, cgroup: Cgroup, allowed: Sequence[int] | None = None, process: object = None) -> None:
        self.name = name
        self.cgroup = cgroup
        self.groups = cgroup.lineage()
        self.quota_group = cgroup.quota_group()
        self.allowed = tuple(allowed) if allowed is not None else None
        self.core: int | None = None
        self.state = "S"
        self.want = 0.0
        self.mode = "user"
        #: CPU seconds the thread got in the last step
        self.got = 0.0
        #: while in D: whether it waits in io_schedule() (IO pressure, iowait)
        self.iowait = True
        self.cpu_user = 0.0
        self.cpu_system = 0.0
        self.eff = 0.0
        self.process = process

    def run(self, want: float = 1.0, mode: str = "user") -> None:
        self.state = "R"
        self.want = want
        self.mode = mode

    def block(self, iowait: bool = True) -> None:
        self.state = "D"
        self.want = 0.0
        self.iowait = iowait

    def sleep(self) -> None:
        self.state = "S"
        self.want = 0.0

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_user + self.cpu_system


class CpuNode:
    """The cores of one host, their /proc/stat counters, the scheduler and PSI."""

    MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    def __init__(self, cores: int, uptime: float, root: Cgroup, rng) -> None:
        self.n = cores
        self.root = root
        self.threads: list[Thread] = []
        self.groups: list[Cgroup] = [root]
        # /proc/stat counts from boot: a host up for ``uptime`` seconds, mostly idle so far.
        # One list per mode, one entry per core.
        self.modes = {m: [0.0] * cores for m in self.MODES}
        for c in range(cores):
            busy = uptime * rng.uniform(0.15, 0.35)
            self.modes["user"][c] = busy * 0.85
            self.modes["nice"][c] = uptime * 0.001
            self.modes["system"][c] = busy * 0.13
            self.modes["softirq"][c] = busy * 0.02
            self.modes["iowait"][c] = uptime * 0.001
            self.modes["idle"][c] = uptime - busy - uptime * 0.002
        for key in PSI_KEYS:
            root.stall[key] = uptime * (0.002 if key[0] != "memory" else 0.0002)
        self._next_core = 0
        self.procs_running = 0
        self.procs_blocked = 0
        #: extra softirq seconds per core this step (network receive processing)
        self.softirq_load: dict[int, float] = {}

    # -- set-up ----------------------------------------------------------------------------
    def add_group(self, group: Cgroup) -> Cgroup:
        if group not in self.groups:
            self.groups.append(group)
        return group

    def add_thread(self, thread: Thread) -> Thread:
        self.add_group(thread.cgroup)
        if thread.core is None:
            if thread.allowed:
                thread.core = thread.allowed[self._next_core % len(thread.allowed)]
            else:
                thread.core = self._next_core % self.n
            self._next_core += 1
        self.threads.append(thread)
        return thread

    def threads_of(self, group: Cgroup) -> list[Thread]:
        return [t for t in self.threads if group in t.groups]

    # -- one step --------------------------------------------------------------------------
    def step(self, t: float, dt: float) -> None:
        self._periods(t)
        runnable = [th for th in self.threads if th.state == "R" and th.want > 0.0]
        demand: dict[Cgroup, float] = {}
        for th in runnable:
            if th.quota_group is not None:
                demand[th.quota_group] = demand.get(th.quota_group, 0.0) + th.want * dt
        scale: dict[Cgroup, float] = {}
        for group, wanted in demand.items():
            group.period_runnable = True
            left = group.runtime_left
            f = 0.0 if left <= 1e-12 else min(1.0, left / wanted)
            if f < 1.0:
                group.period_throttled = True
            scale[group] = f
        load = [0.0] * self.n
        occupants: dict[int, list[Thread]] = {}
        pending = []
        for th in runnable:
            f = scale.get(th.quota_group, 1.0) if th.quota_group is not None else 1.0
            th.eff = th.want * f
            th.got = 0.0
            if th.eff <= 0.0:
                continue
            c = th.core
            if c is not None and load[c] == 0.0:
                load[c] = th.eff
                occupants[c] = [th]
            else:
                pending.append(th)
        for th in self.threads:
            if th.state != "R" or th.want <= 0.0:
                th.got = 0.0
        cursor = 0
        for th in pending:
            c = None
            if th.allowed is not None:
                for a in th.allowed:
                    if load[a] == 0.0:
                        c = a
                        break
                if c is None:
                    c = min(th.allowed, key=lambda a: load[a])
            else:
                while cursor < self.n and load[cursor] != 0.0:
                    cursor += 1
                if cursor < self.n:
                    c = cursor
                else:
                    c = min(range(self.n), key=lambda a: load[a])
            th.core = c
            load[c] += th.eff
            occupants.setdefault(c, []).append(th)
        for c, ths in occupants.items():
            total = load[c]
            share = 1.0 if total <= 1.0 else 1.0 / total
            for th in ths:
                th.got = th.eff * share * dt
        # CPU time to threads, groups and cores.
        busy_user = [0.0] * self.n
        busy_sys = [0.0] * self.n
        for th in runnable:
            got = th.got
            if got <= 0.0:
                continue
            if th.mode == "system":
                th.cpu_system += got
                busy_sys[th.core] += got
                for g in th.groups:
                    g.system += got
                    g.usage += got
            else:
                th.cpu_user += got
                busy_user[th.core] += got
                for g in th.groups:
                    g.user += got
                    g.usage += got
            if th.quota_group is not None:
                th.quota_group.runtime_left -= got
                th.quota_group.period_usage += got
        # Throttled run queues: one per CPU the group's throttled threads sit on.
        for group, f in scale.items():
            if f < 1.0:
                cores = {th.core for th in runnable if th.quota_group is group}
                group.throttled_seconds += len(cores) * (1.0 - f) * dt
        io_cores = set()
        blocked = 0
        for th in self.threads:
            if th.state == "D":
                blocked += 1
                if th.iowait:
                    io_cores.add(th.core)
        self.procs_running = len(runnable)
        self.procs_blocked = blocked
        user, system, softirq = self.modes["user"], self.modes["system"], self.modes["softirq"]
        idle_l, iowait = self.modes["idle"], self.modes["iowait"]
        soft_load = self.softirq_load
        for c in range(self.n):
            bu, bs = busy_user[c], busy_sys[c]
            soft = soft_load.get(c, 0.0) if soft_load else 0.0
            total = bu + bs + soft
            if total <= 0.0:
                if c in io_cores:
                    iowait[c] += dt
                else:
                    idle_l[c] += dt
                continue
            if total > dt:
                f = dt / total
                bu, bs, soft, total = bu * f, bs * f, soft * f, dt
            user[c] += bu
            system[c] += bs
            softirq[c] += soft
            idle = dt - total
            if idle > 0:
                if c in io_cores:
                    iowait[c] += idle
                else:
                    idle_l[c] += idle
        self.softirq_load = {}
        self._pressure(dt, runnable)

    def _periods(self, t: float) -> None:
        for g in self.groups:
            if g.quota_cores is None:
                continue
            index = math.floor((t - g.phase) / g.period)
            if index != g.period_index:
                if g.period_index is not None:
                    if g.period_runnable:
                        g.nr_periods += 1
                    if g.period_throttled:
                        g.nr_throttled += 1
                g.max_period_usage = max(g.max_period_usage, g.period_usage)
                g.period_index = index
                g.runtime_left = g.quota_cores * g.period
                g.period_usage = 0.0
                g.period_runnable = g.period_throttled = False

    def _pressure(self, dt: float, runnable: Iterable[Thread]) -> None:
        # per group: core -> [running share, delayed share, io waiting]
        per: dict[Cgroup, dict[int, list[float]]] = {}
        for th in runnable:
            running = th.got / dt
            delayed = max(0.0, th.want - running)
            for g in th.groups:
                cell = per.setdefault(g, {}).setdefault(th.core, [0.0, 0.0, 0.0])
                cell[0] += running
                cell[1] += delayed
        for th in self.threads:
            if th.state == "D" and th.iowait:
                for g in th.groups:
                    per.setdefault(g, {}).setdefault(th.core, [0.0, 0.0, 0.0])[2] = 1.0
        for g, cores in per.items():
            nonidle = 0
            sums = [0.0, 0.0, 0.0, 0.0]
            for running, delayed, io in cores.values():
                if running <= 0.0 and delayed <= 0.0 and io <= 0.0:
                    continue
                nonidle += 1
                some_cpu = min(1.0, delayed)
                sums[0] += some_cpu
                sums[1] += min(some_cpu, max(0.0, 1.0 - running))
                if io:
                    sums[2] += 1.0
                    sums[3] += max(0.0, 1.0 - min(1.0, running))
            if nonidle:
                g.stall[("cpu", "some")] += dt * sums[0] / nonidle
                g.stall[("cpu", "full")] += dt * sums[1] / nonidle
                g.stall[("io", "some")] += dt * sums[2] / nonidle
                g.stall[("io", "full")] += dt * sums[3] / nonidle

    # -- reads -----------------------------------------------------------------------------
    def proc_stat(self) -> dict[str, dict[str, float]]:
        """Per-core times as /proc/stat prints them: whole USER_HZ ticks, as seconds."""
        modes = [(m, self.modes[m]) for m in self.MODES]
        floor = math.floor
        return {str(c): {m: floor(v[c] * 100.0) / 100.0 for m, v in modes} for c in range(self.n)}

    def add_softirq(self, core: int, seconds: float) -> None:
        self.softirq_load[core] = self.softirq_load.get(core, 0.0) + seconds
