"""FairTurns: turns at bcrypt shared round-robin between clients, each with a bounded queue."""

from __future__ import annotations

import threading
import time

import pytest

from gpuwait.exposition.turns import FairTurns, TurnsFull


class Waiter(threading.Thread):
    """Asks for a turn for ``key`` and records when it got one (in the order of ``log``)."""

    def __init__(self, turns: FairTurns, key: str, log: list[str], lock: threading.Lock,
                 still_wanted=lambda: True) -> None:
        super().__init__(daemon=True)
        self.turns, self.key, self.log, self.lock, self.still_wanted = turns, key, log, lock, still_wanted
        self.got: bool | None = None
        self.release_it = threading.Event()

    def run(self) -> None:
        self.got = self.turns.acquire(self.key, self.still_wanted)
        if self.got:
            with self.lock:
                self.log.append(self.key)
            self.release_it.wait(10)
            self.turns.release()


def wait_for(predicate, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_free_turns_are_taken_without_waiting_and_given_back():
    turns = FairTurns(2, 4)
    assert turns.acquire("a") and turns.acquire("b")
    turns.release()
    assert turns.acquire("c")
    turns.release()
    turns.release()
    assert turns.acquire("a") and turns.acquire("a")


def test_a_newcomer_waits_one_turn_per_other_client_not_behind_a_whole_flood():
    turns = FairTurns(1, 4)
    log: list[str] = []
    lock = threading.Lock()
    assert turns.acquire("holder")
    flood = [Waiter(turns, "flood", log, lock) for _ in range(4)]
    for w in flood:
        w.start()
        wait_for(lambda n=flood.index(w) + 1: turns.waiting() == n)
    scrape = Waiter(turns, "prometheus", log, lock)
    scrape.start()
    wait_for(lambda: turns.waiting() == 5)
    turns.release()  # the holder's turn ends; waiters now release as soon as they have run
    for w in (*flood, scrape):
        w.release_it.set()
    for w in (*flood, scrape):
        w.join(10)
    # A first-come queue would have let all four of the flood in first.
    assert log[:2] == ["flood", "prometheus"], log
    assert sorted(log) == ["flood"] * 4 + ["prometheus"]


def test_a_client_past_its_bound_is_refused_at_once_others_are_not():
    turns = FairTurns(1, 2)
    log: list[str] = []
    lock = threading.Lock()
    assert turns.acquire("holder")
    waiting = [Waiter(turns, "flood", log, lock) for _ in range(2)]
    for w in waiting:
        w.start()
    wait_for(lambda: turns.waiting() == 2)
    with pytest.raises(TurnsFull):
        turns.acquire("flood")
    other = Waiter(turns, "prometheus", log, lock)
    other.start()
    wait_for(lambda: turns.waiting() == 3)
    turns.release()
    for w in (*waiting, other):
        w.release_it.set()
    for w in (*waiting, other):
        w.join(10)
    assert all(w.got for w in (*waiting, other))


def test_a_waiter_that_gives_up_leaves_the_queue_and_holds_nothing():
    turns = FairTurns(1, 4)
    log: list[str] = []
    lock = threading.Lock()
    assert turns.acquire("holder")
    cut = threading.Event()
    quitter = Waiter(turns, "flood", log, lock, still_wanted=lambda: not cut.is_set())
    quitter.start()
    wait_for(lambda: turns.waiting() == 1)
    cut.set()
    quitter.join(5)
    assert quitter.got is False and turns.waiting() == 0
    turns.release()
    # The turn the holder gave back is free again, not lost to the one that left.
    assert turns.acquire("next")
