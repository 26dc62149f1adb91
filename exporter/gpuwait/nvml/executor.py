"""One worker thread per GPU, so that a driver call that never returns costs that GPU only.

NVML calls cannot be interrupted from Python: a call stuck in the kernel driver holds its
thread until the driver lets go, possibly forever. The caller therefore never waits on a call
directly. It hands a job to the GPU's worker and waits with a deadline; a job still running at
the deadline is abandoned together with its worker thread, and a fresh worker takes over the
GPU's queue. Abandoned workers are counted; past ``max_stuck`` the GPU takes no more jobs
until one of them comes back, so a GPU that hangs on everything cannot pile up threads.

Nothing here knows about NVML: jobs are plain callables.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any


class Partial:
    """A job's results, written as they arrive so that a job abandoned mid-way still yields
    what it read before the call that hung. Writes after ``freeze`` are dropped: a stuck
    thread that wakes up late cannot change a result already handed out."""

    __slots__ = ("_values", "_lock", "_frozen")

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._frozen = False

    def __setitem__(self, key: str, value: Any) -> None:
        with self._lock:
            if not self._frozen:
                self._values[key] = value

    def freeze(self) -> dict[str, Any]:
        with self._lock:
            self._frozen = True
            return dict(self._values)


class Ticket:
    """One job on one worker: its state as the waiting side sees it."""

    __slots__ = ("job", "out", "done", "started_at", "current", "stuck_in", "error", "abandoned", "cancelled", "_worker",
                 "_latch")

    def __init__(self, job: Callable[["Ticket", Partial], None]) -> None:
        self.job = job
        self.out = Partial()
        #: Finished or cancelled; written under its executor's lock.
        self.done = False
        #: Counted down when the job finishes: the waiting side's, set under the same lock.
        self._latch: _Latch | None = None
        self.started_at: float | None = None
        #: What the job is doing right now (set by the job before each call), so that an
        #: abandoned job can name the call that hung.
        self.current: str | None = None
        #: ``current`` at the moment the job was abandoned: the call that hung.
        self.stuck_in: str | None = None
        self.error: BaseException | None = None
        self.abandoned = False
        self.cancelled = False
        self._worker: _Worker | None = None


class _Latch:
    """The jobs one ``wait_all`` waits for: the waiting side is woken once, by the last of
    them, where waiting on each in turn would wake it once per GPU at every tick."""

    __slots__ = ("_lock", "_remaining", "_gate")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: One more than the jobs watched until the waiting side has watched them all, so that
        #: jobs finishing meanwhile cannot open the gate early.
        self._remaining = 1
        self._gate = threading.Lock()
        self._gate.acquire()

    def add(self) -> None:
        with self._lock:
            self._remaining += 1

    def count_down(self) -> None:
        with self._lock:
            self._remaining -= 1
            if self._remaining == 0:
                self._gate.release()

    def wait(self, timeout: float) -> None:
        if timeout > 0 and self._gate.acquire(timeout=timeout):
            self._gate.release()


class _Worker:
    __slots__ = ("retired", "ticket", "thread")

    def __init__(self) -> None:
        self.retired = False
        self.ticket: Ticket | None = None
        self.thread: threading.Thread | None = None


class DeviceExecutor:
    """A queue of jobs for one GPU, served by one live worker thread at a time."""

    def __init__(self, name: str, max_stuck: int = 3,
                 on_stuck_return: Callable[[Ticket], None] | None = None) -> None:
        self.name = name
        self.max_stuck = max_stuck
        self._on_stuck_return = on_stuck_return
        self._cv = threading.Condition(threading.Lock())
        self._queue: deque[Ticket] = deque()
        self._worker: _Worker | None = None
        self._stuck = 0
        self._closed = False

    # -- submitting side -------------------------------------------------------------------
    @property
    def stuck(self) -> int:
        """Abandoned workers still inside a call."""
        return self._stuck

    @property
    def saturated(self) -> bool:
        return self._stuck >= self.max_stuck

    def submit(self, job: Callable[[Ticket, Partial], None]) -> Ticket | None:
        """Queue a job; None when the GPU already holds ``max_stuck`` hung calls."""
        ticket = Ticket(job)
        with self._cv:
            if self._closed or self._stuck >= self.max_stuck:
                return None
            self._queue.append(ticket)
            if self._worker is None:
                self._start_worker()
            self._cv.notify()
        return ticket

    def settle(self, ticket: Ticket) -> str:
        """At the deadline: 'done', 'cancelled' (never started, removed from the queue) or
        'abandoned' (running: its worker is given up and replaced)."""
        with self._cv:
            if ticket.done:
                return "done"
            if ticket.started_at is None:
                try:
                    self._queue.remove(ticket)
                except ValueError:  # picked up just now; treat it as running
                    pass
                else:
                    ticket.cancelled = True
                    ticket.out.freeze()
                    return "cancelled"
            worker = ticket._worker
            ticket.stuck_in = ticket.current
            ticket.abandoned = True
            ticket.out.freeze()
            if worker is not None and not worker.retired and worker is self._worker:
                worker.retired = True
                self._stuck += 1
                self._worker = None
                if self._queue and self._stuck < self.max_stuck:
                    self._start_worker()
            return "abandoned"

    def close(self) -> None:
        with self._cv:
            self._closed = True
            for ticket in self._queue:
                ticket.cancelled = True
                self._finish(ticket)
            self._queue.clear()
            if self._worker is not None:
                self._worker.retired = True
                self._worker = None
            self._cv.notify_all()

    def _watch(self, ticket: Ticket, latch: _Latch) -> None:
        """Have ``latch`` counted down when ``ticket`` finishes, unless it has."""
        with self._cv:
            if not ticket.done:
                ticket._latch = latch
                latch.add()

    @staticmethod
    def _finish(ticket: Ticket) -> None:
        """Under the lock."""
        ticket.done = True
        latch, ticket._latch = ticket._latch, None
        if latch is not None:
            latch.count_down()

    # -- worker side -----------------------------------------------------------------------
    def _start_worker(self) -> None:
        worker = _Worker()
        worker.thread = threading.Thread(target=self._serve, args=(worker,), name=f"nvml-{self.name}", daemon=True)
        self._worker = worker
        worker.thread.start()

    def _serve(self, worker: _Worker) -> None:
        while True:
            with self._cv:
                while not self._queue and not worker.retired:
                    self._cv.wait()
                if worker.retired:
                    return
                ticket = self._queue.popleft()
                ticket._worker = worker
                ticket.started_at = time.monotonic()
                worker.ticket = ticket
            try:
                ticket.job(ticket, ticket.out)
            except BaseException as e:  # handed to the waiting side, which decides
                ticket.error = e
            came_back_late = False
            with self._cv:
                worker.ticket = None
                # Set under the lock: settle() must never see a finished job as running.
                self._finish(ticket)
                if worker.retired and not self._closed:
                    self._stuck -= 1
                    came_back_late = True
                    if self._worker is None and self._queue:
                        self._start_worker()
            if came_back_late:
                if self._on_stuck_return is not None:
                    self._on_stuck_return(ticket)
                return
            if worker.retired:
                return


def wait_all(pending: Iterable[tuple[DeviceExecutor, Ticket]], deadline: float) -> dict[int, str]:
    """Wait for every ticket until ``deadline`` (time.monotonic()), then settle the rest.
    Returns {id(ticket): outcome}."""
    pending = list(pending)
    outcome: dict[int, str] = {}
    latch = _Latch()
    for executor, ticket in pending:
        executor._watch(ticket, latch)
    latch.count_down()
    latch.wait(deadline - time.monotonic())
    for executor, ticket in pending:
        outcome[id(ticket)] = executor.settle(ticket)
    return outcome
