"""Block devices and NFS mounts.

A disk serves the requests its users keep in flight. Each request needs at least the
device's unloaded latency; beyond that the device completes at most ``iops`` requests and
``bandwidth`` bytes per second, first come first served, so queueing delay grows with what is
in flight (Little's law: in flight = completion rate x time in the system). The counters are
those of /proc/diskstats (Documentation/admin-guide/iostats.rst): time reading/writing is the
sum of the completed requests' times, io_time the time with at least one request in flight,
and the weighted io_time the integral of the number in flight.

An NFS mount sends RPCs to a server. Each RPC waits for the server's service time and then
for its reply to cross the client's NIC, which carries READ replies at most at line rate,
shared first come first served. Per operation the counters are those of
/proc/self/mountstats: operations, transmissions, bytes sent and received, and queue, RTT and
execute milliseconds.
"""

from __future__ import annotations



class Batch:
    """``count`` equal requests from one requester (one worker's reads for one batch, one
    checkpoint chunk), at most ``depth`` of them in flight at a time (a synchronous reader has
    depth 1): served as the device allows, so it completes gradually; ``done`` once all are."""

    __slots__ = ("op", "count", "size", "depth", "submitted", "ready", "served", "completed", "cgroup")

    def __init__(self, op: str, count: int, size: int, depth: int, submitted: float, ready: float, cgroup=None) -> None:
        self.op = op
        self.count = count
        self.size = size
        self.depth = depth
        self.submitted = submitted
        self.ready = ready
        self.served = 0.0
        self.completed = 0
        self.cgroup = cgroup

    @property
    def done(self) -> bool:
        return self.completed >= self.count

    @property
    def in_flight(self) -> int:
        return min(self.depth, self.count - self.completed)


class Disk:
    def __init__(self, name: str, major: int, minor: int, read_iops: float, read_bandwidth: float,
                 read_latency: float, write_iops: float, write_bandwidth: float, write_latency: float,
                 rng, uptime: float) -> None:
        self.name = name
        self.major = major
        self.minor = minor
        self.key = f"{major}:{minor}"
        self.limits = {"read": (read_iops, read_bandwidth, read_latency), "write": (write_iops, write_bandwidth, write_latency)}
        self.queue: list[Batch] = []
        self._credit = 0.0
        # counters since boot: a disk that has done some work before
        base = int(uptime * rng.uniform(20, 200))
        self.c = {
            "reads_completed": base, "reads_merged": base // 20, "read_bytes": base * 65536,
            "read_time_seconds": base * 0.0002, "writes_completed": base // 2, "writes_merged": base // 10,
            "write_bytes": base * 32768, "write_time_seconds": base * 0.00005, "io_time_seconds": uptime * 0.01,
            "io_time_weighted_seconds": uptime * 0.012, "discards_completed": 0, "discards_merged": 0,
            "discard_bytes": 0, "discard_time_seconds": 0.0, "flushes_completed": base // 100, "flush_time_seconds": base * 1e-6,
        }

    def submit(self, op: str, count: int, size: int, t: float, depth: int = 1, cgroup=None) -> Batch:
        b = Batch(op, count, size, depth, t, t + self.limits[op][2], cgroup)
        self.queue.append(b)
        return b

    @property
    def in_flight(self) -> int:
        return sum(b.in_flight for b in self.queue)

    def step(self, t: float, dt: float) -> None:
        end = t + dt
        start_reads = sum(b.in_flight for b in self.queue if b.op == "read")
        start_writes = sum(b.in_flight for b in self.queue if b.op == "write")
        # The device's time this step is shared among the requests in flight (an NVMe's
        # queues serve every submitter's requests as they come, so a requester's share of
        # the device grows with how many it keeps in flight). A request costs whichever of
        # its IOPS or bandwidth share is larger, and a requester with ``depth`` in flight
        # completes at most depth / latency requests per second (Little's law).
        self._credit = min(self._credit + dt, 2 * dt)
        budget = self._credit
        taken: dict[int, float] = {}
        active = [b for b in self.queue if b.ready <= end]
        for _ in range(4):
            if budget <= 1e-12 or not active:
                break
            weight = sum(b.in_flight for b in active) or 1
            spent = 0.0
            still = []
            for b in active:
                iops, bandwidth, latency = self.limits[b.op]
                cost = max(1.0 / iops, b.size / bandwidth)
                share = budget * b.in_flight / weight
                window = end - max(t, b.ready)
                by_depth = b.depth * window / latency - taken.get(id(b), 0.0)
                want = min(b.count - b.served, by_depth)
                take = min(want, share / cost)
                if take <= 0:
                    continue
                b.served += take
                taken[id(b)] = taken.get(id(b), 0.0) + take
                spent += take * cost
                whole = int(b.served + 1e-9) - b.completed
                if b.served >= b.count - 1e-9:
                    whole = b.count - b.completed
                if whole > 0:
                    self._complete(b, whole)
                if take >= share / cost - 1e-12 and not b.done:
                    still.append(b)
            budget -= spent
            active = still
        self._credit = max(0.0, budget)
        self.queue = [b for b in self.queue if not b.done]
        end_reads = sum(b.in_flight for b in self.queue if b.op == "read")
        end_writes = sum(b.in_flight for b in self.queue if b.op == "write")
        if start_reads + start_writes > 0 or end_reads + end_writes > 0:
            self.c["io_time_seconds"] += dt
        # Each request's time in the device summed over requests is the integral of the
        # number in flight (Little's law), which is what the kernel's read/write ticks add up.
        reads = (start_reads + end_reads) / 2.0
        writes = (start_writes + end_writes) / 2.0
        self.c["read_time_seconds"] += reads * dt
        self.c["write_time_seconds"] += writes * dt
        self.c["io_time_weighted_seconds"] += (reads + writes) * dt

    def _complete(self, b: Batch, n: int) -> None:
        b.completed += n
        if b.op == "read":
            self.c["reads_completed"] += n
            self.c["read_bytes"] += n * b.size
            if b.cgroup is not None:
                b.cgroup.account_io(self.key, read_bytes=n * b.size, reads=n)
        else:
            self.c["writes_completed"] += n
            self.c["write_bytes"] += n * b.size
            if b.cgroup is not None:
                b.cgroup.account_io(self.key, write_bytes=n * b.size, writes=n)

    def diskstats(self) -> dict:
        c = self.c
        return {
            "major": self.major, "minor": self.minor,
            "reads_completed": int(c["reads_completed"]), "reads_merged": int(c["reads_merged"]),
            "read_bytes": int(c["read_bytes"]) // 512 * 512,
            "read_time_seconds": int(c["read_time_seconds"] * 1000) / 1000.0,
            "writes_completed": int(c["writes_completed"]), "writes_merged": int(c["writes_merged"]),
            "write_bytes": int(c["write_bytes"]) // 512 * 512,
            "write_time_seconds": int(c["write_time_seconds"] * 1000) / 1000.0,
            "io_now": int(self.in_flight),
            "io_time_seconds": int(c["io_time_seconds"] * 1000) / 1000.0,
            "io_time_weighted_seconds": int(c["io_time_weighted_seconds"] * 1000) / 1000.0,
            "discards_completed": int(c["discards_completed"]), "discards_merged": int(c["discards_merged"]),
            "discard_bytes": int(c["discard_bytes"]), "discard_time_seconds": c["discard_time_seconds"],
            "flushes_completed": int(c["flushes_completed"]), "flush_time_seconds": int(c["flush_time_seconds"] * 1000) / 1000.0,
        }


class Rpc:
    """``count`` units of work on one mount, each a sequence of RPCs (e.g. LOOKUP, OPEN,
    GETATTR, READ for one small file), at most ``depth`` units in flight (readahead or
    parallel reads); replies are produced by the server as it serves them and cross the NIC
    as it has room."""

    __slots__ = ("ops", "count", "depth", "service", "reply", "submitted", "delivered", "done", "finished")

    def __init__(self, ops: list[tuple[str, int, int, float]], count: int, depth: int, submitted: float) -> None:
        #: (op, request bytes, reply bytes, service seconds) per RPC of one unit
        self.ops = ops
        self.count = count
        self.depth = depth
        self.service = sum(o[3] for o in ops)
        self.reply = sum(o[2] for o in ops)
        self.submitted = submitted
        self.delivered = 0.0
        self.done = False
        self.finished = 0.0


METADATA_OPS = ("GETATTR", "LOOKUP", "ACCESS", "OPEN")
NFS_OPS = ("NULL", "READ", "WRITE", "COMMIT", "OPEN", "CLOSE", "GETATTR", "LOOKUP", "ACCESS", "READDIR")


class NfsMount:
    def __init__(self, mountpoint: str, export: str, nic, service: dict[str, float], rng, version: str = "4.2") -> None:
        self.mountpoint = mountpoint
        self.export = export
        self.nic = nic
        #: op -> the server's service time in seconds
        self.service = dict(service)
        #: multiplies every service time (a filer under load, a failing disk behind it)
        self.slowdown = 1.0
        self.version = version
        self.rpcs: list[Rpc] = []
        base = rng.randint(10_000, 100_000)
        self.ops = {op: {"ops": base, "transmissions": base, "timeouts": 0, "bytes_sent": base * 200,
                         "bytes_received": base * 180, "queue_ms": base / 50.0, "rtt_ms": base / 2.0,
                         "execute_ms": base / 2.0 + base / 40.0, "errors": 0}
                    for op in NFS_OPS}
        self.bytes = {"normal_read": base * 131072, "normal_write": base * 4096, "direct_read": 0, "direct_write": 0,
                      "server_read": base * 131072, "server_write": base * 4096, "read_pages": base * 32, "write_pages": base}

    def call(self, sequence: list[tuple[str, int]], t: float, count: int = 1, depth: int = 1) -> Rpc:
        """``count`` units of ``sequence`` ((op, payload bytes) RPCs, in order) sent from ``t``."""
        ops = []
        for op, payload in sequence:
            request = 200 + (payload if op == "WRITE" else 0)
            reply = 120 + (payload if op == "READ" else 0)
            service = self.service.get(op, self.service.get("GETATTR", 0.0005)) * self.slowdown
            ops.append((op, request, reply, service))
            if op == "READ":
                self.bytes["normal_read"] += payload * count
                self.bytes["server_read"] += payload * count
                self.bytes["read_pages"] += (payload * count) // 4096
            elif op == "WRITE":
                self.bytes["normal_write"] += payload * count
                self.bytes["server_write"] += payload * count
                self.bytes["write_pages"] += (payload * count) // 4096
        rpc = Rpc(ops, count, depth, t)
        self.rpcs.append(rpc)
        self.nic.transmit(sum(o[1] for o in ops) * count)
        return rpc

    def step(self, t: float, dt: float) -> None:
        if not self.rpcs:
            return
        end = t + dt
        budget = self.nic.receive_budget(dt)
        used = 0.0
        for rpc in self.rpcs:
            if rpc.service > 0:
                produced = min(float(rpc.count), rpc.depth * (end - rpc.submitted) / rpc.service)
            else:
                produced = float(rpc.count)
            available = produced * rpc.reply - rpc.delivered
            take = min(available, budget - used)
            if take > 0:
                rpc.delivered += take
                used += take
            if rpc.delivered >= rpc.count * rpc.reply - 1e-6:
                rpc.finished = t + (dt * used / budget if budget > 0 else dt)
                self._complete(rpc)
        self.rpcs = [r for r in self.rpcs if not r.done]
        self.nic.receive(used)

    def _complete(self, rpc: Rpc) -> None:
        rpc.done = True
        # Little's law: each unit spent elapsed x depth / count in flight; its RPCs share that
        # in proportion to their service and wire time.
        per_unit = max(0.0, rpc.finished - rpc.submitted) * min(rpc.depth, rpc.count) / rpc.count
        weights = [o[3] + o[2] / self.nic.rate for o in rpc.ops]
        total = sum(weights) or 1.0
        for (op, request, reply, _), w in zip(rpc.ops, weights):
            o = self.ops[op]
            execute = per_unit * w / total
            queue = min(execute, 0.00002)
            o["ops"] += rpc.count
            o["transmissions"] += rpc.count
            o["bytes_sent"] += request * rpc.count
            o["bytes_received"] += reply * rpc.count
            o["queue_ms"] += rpc.count * queue * 1000.0
            o["rtt_ms"] += rpc.count * (execute - queue) * 1000.0
            o["execute_ms"] += rpc.count * execute * 1000.0

    def mountstats(self) -> dict:
        listed = ("READ", "GETATTR", "LOOKUP", "OPEN", "ACCESS", "READDIR", "WRITE", "COMMIT")
        ops = {op: {k: (int(x) if k != "errors" else x) for k, x in self.ops[op].items()} for op in listed}
        meta = sum(int(self.ops[op]["ops"]) for op in METADATA_OPS)
        return {
            "export": self.export, "fstype": "nfs4" if self.version.startswith("4") else "nfs",
            "version": self.version, "protocol": "tcp", "bytes": {k: int(v) for k, v in self.bytes.items()}, "ops": ops,
            "metadata_ops": meta, "all_ops": sum(int(v["ops"]) for v in self.ops.values()),
        }
