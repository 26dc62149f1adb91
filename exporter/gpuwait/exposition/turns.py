"""Turns at a scarce resource (the cores bcrypt may use), shared fairly between clients.

A first-come queue lets whoever sends the most requests hold it: a flood of wrong passwords
from one address queues ahead of Prometheus's first check after a start or a reload, which
then waits behind the whole flood. So those waiting are queued by class (the client's
address and the user it names) and the turns go round the classes, one each, as nginx's
``limit_req`` and fair queuing in routers do: a new class waits for at most one turn per
other class waiting, however deep the others' queues. Each class may hold only a few
waiting; past that a request is refused at once instead of holding a thread and a place.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable


class TurnsFull(Exception):
    """The client's class already has its bound of requests waiting."""


class _Ticket:
    __slots__ = ("granted", "event")

    def __init__(self) -> None:
        self.granted = False
        self.event = threading.Event()


class FairTurns:
    """At most ``slots`` turns held at once; waiters served round-robin across classes."""

    def __init__(self, slots: int, waiting_per_class: int, poll_seconds: float = 0.05) -> None:
        self.slots = slots
        self.waiting_per_class = waiting_per_class
        self.poll_seconds = poll_seconds
        self._free = slots
        #: class -> its waiters in arrival order; the dict's order is the round's.
        self._waiting: dict[Hashable, deque[_Ticket]] = {}
        self._lock = threading.Lock()

    def acquire(self, key: Hashable, still_wanted: Callable[[], bool] = lambda: True) -> bool:
        """True: a turn is held, release() it; False: ``still_wanted`` said no while
        waiting (the connection was cut), nothing is held. Raises TurnsFull."""
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return True
            queue = self._waiting.setdefault(key, deque())
            if len(queue) >= self.waiting_per_class:
                raise TurnsFull(key)
            ticket = _Ticket()
            queue.append(ticket)
        while not ticket.event.wait(self.poll_seconds):
            if still_wanted():
                continue
            with self._lock:
                granted = ticket.granted
                if not granted:
                    queue.remove(ticket)
                    if not queue and self._waiting.get(key) is queue:
                        del self._waiting[key]
            if granted:  # in the meantime: pass the turn on
                self.release()
            return False
        return True

    def release(self) -> None:
        with self._lock:
            if not self._waiting:
                self._free += 1
                return
            key = next(iter(self._waiting))
            queue = self._waiting.pop(key)
            ticket = queue.popleft()
            if queue:  # the class goes to the back of the round
                self._waiting[key] = queue
            ticket.granted = True
            ticket.event.set()

    def waiting(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._waiting.values())
