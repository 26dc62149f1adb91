"""Workload-side timing for training and inference loops (A8, A13).

The one reliable test of a data-bound job is to compare how long each step waits for its
next batch with how long it computes (A8). Only the loop itself knows that, so it reports
it here, and the node's gpuwait exporter reads the reports::

    from gpuwait.workload import Workload   # or gpuwait.client, the module's own name
    workload = Workload()
    for batch in workload.batches(loader):   # time in next() = data wait, the rest = compute
        ...

Marking a phase costs one clock read and two attribute stores (see bench/workload_overhead.py).
Nothing here ever blocks or raises into the loop: the counters live in memory, and a daemon
thread writes them about once a second as one small text file per process under the spool
directory (``GPUWAIT_SPOOL``, default /run/gpuwait/workload), replaced atomically. If the
directory is missing, read-only or full, or the exporter is absent, the write is skipped and
tried again later; a hung file system stalls only that thread. The file is removed at exit;
the exporter drops records of processes that are gone or that stopped writing.

The module imports nothing beyond the standard library, so a job needs no extra dependency;
``torch_loader`` is a convenience that works when PyTorch is importable.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "SPOOL_ENV", "DEFAULT_SPOOL", "HEADER", "SUFFIX", "KINDS", "DATA", "COMPUTE", "COMM", "OUTSIDE", "PHASES",
    "Workload", "format_record", "torch_loader",
]

SPOOL_ENV = "GPUWAIT_SPOOL"
DEFAULT_SPOOL = "/run/gpuwait/workload"
#: First line of every record; the number is the format version.
HEADER = "gpuwait-workload 1"
SUFFIX = ".rec"
KINDS = ("training", "inference")

#: Phase indexes into the accumulators. OUTSIDE is time not spent in an instrumented loop
#: (evaluation, checkpoints, start-up): not counted, so it cannot dilute the ratios.
DATA, COMPUTE, COMM, OUTSIDE = 0, 1, 2, 3
PHASES = ("data", "compute", "comm")

_instances = itertools.count()
_live: "weakref.WeakSet[Workload]" = weakref.WeakSet()


def _self_starttime() -> int:
    """This process's start time in clock ticks after boot (/proc/self/stat field 22): with
    the pid it names this process even after the pid is reused."""
    try:
        with open("/proc/self/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def format_record(fields: dict[str, Any]) -> str:
    """The record text: the header, then one ``key value`` line per field."""
    lines = [HEADER]
    for key, value in fields.items():
        if isinstance(value, float):
            value = f"{value:.6f}"
        lines.append(f"{key} {value}")
    return "\n".join(lines) + "\n"


class Workload:
    """Per-process timing of one loop: data wait, compute, communication, steps, samples,
    requests. Use one per loop; all methods are safe to call from the loop's thread at any
    rate, and never raise because of the spool."""

    def __init__(
        self,
        kind: str = "training",
        *,
        spool: str | None = None,
        rank: int | None = None,
        job: str | None = None,
        flush_interval: float = 1.0,
        start: bool = True,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        self.kind = kind
        self.spool = spool or os.environ.get(SPOOL_ENV) or DEFAULT_SPOOL
        self.rank = rank if rank is not None else _env_rank()
        self.job = _clean(job or os.environ.get("GPUWAIT_JOB", ""))
        self.flush_interval = flush_interval
        self.pid = os.getpid()
        self.starttime = _self_starttime()
        self.instance = next(_instances)
        self.path = os.path.join(self.spool, f"{self.pid}-{self.instance}{SUFFIX}")
        self.seconds = [0.0, 0.0, 0.0, 0.0]
        self.steps = 0
        self.samples = 0
        self.requests = 0
        #: (phase, since): one tuple so the flushing thread reads both in one step
        #: the phase clock; an attribute so that tests can drive it
        self.clock = time.perf_counter
        self._state = (OUTSIDE, self.clock())
        self._published = [0.0, 0.0, 0.0]
        #: failed writes, by errno name: the loop never sees them, tests and users may
        self.write_errors: dict[str, int] = {}
        self.writes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _live.add(self)
        if start:
            self.start()

    # -- marking phases (the hot path) -------------------------------------------------------
    def mark(self, phase: int) -> None:
        """From now on the loop is in ``phase`` (DATA, COMPUTE, COMM or OUTSIDE)."""
        now = self.clock()
        previous, since = self._state
        self.seconds[previous] += now - since
        self._state = (phase, now)

    def step(self, samples: int = 0) -> None:
        """One step (or inference batch) finished, of ``samples`` samples."""
        self.steps += 1
        self.samples += samples

    def request(self, count: int = 1) -> None:
        """Requests an inference server accepted; a low rate tells low load from a problem (A13)."""
        self.requests += count

    def phase(self, phase: int) -> "_Phase":
        """``with workload.phase(COMM): all_reduce()`` — back to the enclosing phase afterwards."""
        return _Phase(self, phase)

    def data(self) -> "_Phase":
        return _Phase(self, DATA)

    def compute(self) -> "_Phase":
        return _Phase(self, COMPUTE)

    def comm(self) -> "_Phase":
        return _Phase(self, COMM)

    def batches(self, iterable: Iterable, batch_size: int | Callable[[Any], int] | None = None) -> Iterator:
        """Yields the iterable's items; the time spent getting each is data wait, the time the
        loop body takes is compute, and every item is a step. ``batch_size`` (a number or a
        function of the batch) counts samples for the throughput."""
        size = batch_size if callable(batch_size) else (lambda _b, n=batch_size or 0: n)
        iterator = iter(iterable)
        mark = self.mark
        try:
            while True:
                mark(DATA)
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                mark(COMPUTE)
                yield item
                self.steps += 1
                self.samples += size(item)
        finally:
            mark(OUTSIDE)

    # -- publishing ------------------------------------------------------------------------
    def fields(self) -> dict[str, Any]:
        """The record as of now, the phase in progress included (a loader stuck for a minute
        must show as a minute of data wait before it returns)."""
        phase, since = self._state
        seconds = list(self.seconds[:3])
        if phase != OUTSIDE:
            seconds[phase] += max(0.0, self.clock() - since)
        # The loop may switch phases while this runs; never let a counter go backwards.
        for i in range(3):
            seconds[i] = self._published[i] = max(seconds[i], self._published[i])
        return {
            "pid": self.pid, "starttime": self.starttime, "instance": self.instance,
            "kind": self.kind, "rank": -1 if self.rank is None else self.rank, "job": self.job or "-",
            "at": time.monotonic(), "interval": float(self.flush_interval),
            "data_seconds": seconds[DATA], "compute_seconds": seconds[COMPUTE], "comm_seconds": seconds[COMM],
            "steps": self.steps, "samples": self.samples, "requests": self.requests,
        }

    def flush(self) -> bool:
        """Write the record now; False (and counted in write_errors) if it could not be."""
        if os.getpid() != self.pid:
            return False  # a forked child (a DataLoader worker) must not overwrite its parent's record
        text = format_record(self.fields()).encode()
        tmp = os.path.join(self.spool, f".{self.pid}-{self.instance}.tmp")
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except FileNotFoundError:
                _make_spool(self.spool)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:
            key = _errno_name(e)
            self.write_errors[key] = self.write_errors.get(key, 0) + 1
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self.writes += 1
        return True

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpuwait-workload", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        delay = self.flush_interval
        while not self._stop.wait(delay):
            ok = self.flush()
            # A spool that keeps failing is retried less often, never given up on: the
            # directory may be created or freed later.
            delay = self.flush_interval if ok else min(30.0, max(delay * 2, self.flush_interval))

    def close(self) -> None:
        """Stop publishing and remove the record (also done at exit)."""
        self._stop.set()
        if os.getpid() == self.pid:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class _Phase:
    __slots__ = ("workload", "phase", "previous")

    def __init__(self, workload: Workload, phase: int) -> None:
        self.workload = workload
        self.phase = phase

    def __enter__(self) -> Workload:
        self.previous = self.workload._state[0]
        self.workload.mark(self.phase)
        return self.workload

    def __exit__(self, *exc) -> None:
        self.workload.mark(self.previous)


def torch_loader(loader: Iterable, workload: Workload | None = None) -> Iterator:
    """``for batch in torch_loader(DataLoader(...))``: ``Workload.batches`` with the batch
    size taken from the first tensor in each batch. Works without PyTorch installed too
    (then batches count as steps without samples unless they have a ``len``)."""
    workload = workload or Workload()
    return workload.batches(loader, batch_size=_batch_len)


def _batch_len(batch: Any) -> int:
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_len(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    return 0


def _make_spool(spool: str) -> None:
    # Every user's jobs share the directory, as with /tmp: world-writable with the sticky bit
    # so that no one can remove another user's record.
    os.makedirs(spool, exist_ok=True)
    try:
        os.chmod(spool, 0o1777)
    except OSError:
        pass


def _env_rank() -> int | None:
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def _clean(text: str) -> str:
    # One line, no spaces: a record's value is the rest of its line after the key.
    return "_".join(text.split())[:128]


def _errno_name(error: OSError) -> str:
    import errno

    return errno.errorcode.get(error.errno or 0, "EUNKNOWN")


@atexit.register
def _remove_records() -> None:
    for workload in list(_live):
        workload.close()
