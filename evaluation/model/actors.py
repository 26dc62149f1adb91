"""What threads do, step by step: the building blocks every job is written with.

An actor is a generator resumed once per step: it sets its threads' states for the coming
step (run, block in IO, sleep), submits IO and GPU work, and yields. When it resumes, the
step has been simulated and ``thread.got`` holds the CPU time the thread received.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from evaluation.model.cpu import Thread

Step = Generator[None, None, None]


def compute(th: Thread, seconds: float, dt: float, mode: str = "user") -> Step:
    """``seconds`` of CPU work: runnable until the scheduler has granted that much."""
    left = seconds
    while left > 1e-9:
        th.run(min(1.0, left / dt), mode)
        yield
        left -= th.got
    th.sleep()


def wait(th: Thread, ready: Callable[[], bool], how: str = "sleep") -> Step:
    """Until ``ready()``: asleep (a blocking queue get, a futex), spinning on a core (a CUDA
    synchronize under the default spin policy, a busy-polling progress thread), blocked in
    io_schedule ("io": a read waiting for its pages) or blocked in an RPC wait ("rpc": D state
    without IO pressure)."""
    while not ready():
        if how == "spin":
            th.run(1.0, "user")
        elif how == "io":
            th.block(iowait=True)
        elif how == "rpc":
            th.block(iowait=False)
        else:
            th.sleep()
        yield
    th.sleep()


def sleep_for(th: Thread, clock: Callable[[], float], seconds: float) -> Step:
    until = clock() + seconds
    yield from wait(th, lambda: clock() >= until - 1e-9, "sleep")


class Pipe:
    """Batches between producers (loader workers) and a consumer, with room for ``capacity``
    outstanding (ready plus in preparation): PyTorch's DataLoader keeps prefetch_factor x
    num_workers batches outstanding and hands a worker a new index only when one is taken."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.ready = 0
        self.preparing = 0
        self.produced = 0

    def can_start(self) -> bool:
        return self.ready + self.preparing < self.capacity

    def start(self) -> None:
        self.preparing += 1

    def finish(self) -> None:
        self.preparing -= 1
        self.ready += 1
        self.produced += 1

    def has_ready(self) -> bool:
        return self.ready > 0

    def take(self) -> None:
        self.ready -= 1


class Share:
    """One pipeline feeding several consumers with one global batch at a time (a single
    controller process that shards each global batch across its GPUs)."""

    def __init__(self, capacity: int, consumers: int) -> None:
        self.pipe = Pipe(capacity)
        self.consumers = consumers
        self.taken: dict[int, int] = {}
        self.released = 0

    def has_ready_for(self, consumer: int) -> bool:
        have = self.taken.get(consumer, 0)
        return have < self.released or self.pipe.has_ready()

    def take(self, consumer: int) -> None:
        have = self.taken.get(consumer, 0)
        if have >= self.released:
            self.pipe.take()
            self.released += 1
        self.taken[consumer] = have + 1
