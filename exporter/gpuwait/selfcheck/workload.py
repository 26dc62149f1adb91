"""The self-check's phase driver: PyTorch workloads whose reason for keeping the GPU waiting is
known by construction (docs/selfcheck.md argues each one).

Run as a process of its own, one per phase, so that the exporter sees it as the GPU's compute
process and its DataLoader workers as that process's descendants, as it sees a training job::

    python -m gpuwait.selfcheck.workload probe
    python -m gpuwait.selfcheck.workload run PHASE --counters FILE [phase options]

The GPU is ``cuda:0`` of what the environment makes visible (``gpuwait selfcheck`` sets
CUDA_VISIBLE_DEVICES). The driver speaks to its parent in JSON lines on stdout:
``{"event": "probe", ...}``, ``{"event": "ready", "pid", "uuid", "device", "setup"}`` once
the workload is running steadily, ``{"event": "skip", "reason"}`` when this host cannot run
the phase, ``{"event": "error", "error"}`` (exit code 2) when it cannot be set up. While it
runs it rewrites FILE about twice a second with its cumulative counters
(``{"t": monotonic seconds, "counters": {...}}``); counters ending in ``_seconds`` are time
spent, the others are amounts. SIGTERM stops it.

PyTorch is imported only once a command runs, so the module (its options, their checks and
the sizing arithmetic) imports without it.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import random
import re
import signal
import statistics
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PHASES = ("compute", "few_workers", "cpu_quota", "pageable_copy", "random_reads", "tiny_kernels", "idle_context")
INSTALL_HINT = "pip install 'gpuwait[selfcheck]'"
#: The GPU step of the pipeline phases is made of square bf16 matrix products of this size:
#: large enough to fill every SM, small enough (~0.2 ms on a Hopper GPU) to size a step finely.
STEP_MATMUL = 4096
#: How far ahead of the GPU the compute phase queues work, in seconds of GPU time.
COMPUTE_GROUP_SECONDS = 0.05
#: Filesystems that keep file data in memory only: a read never reaches a device.
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "rootfs"})
#: The image a decode record holds (channels, height, width) and the size the augmentation
#: resizes a random crop of it to, as an ImageNet-style pipeline does.
IMAGE = (3, 512, 512)
CROP = 224
DECODE_RECORDS = 16
#: Records of random_reads above which one batch is not sized (256 MiB of 4 KiB records):
#: two batches are held in host memory at a time.
MAX_BATCH_BYTES = 256 << 20


class SetupError(Exception):
    """The phase cannot be set up; the message says why (exit code 2)."""


class Skip(Exception):
    """This host cannot run the phase as built; the message says why."""


class Stop(Exception):
    """SIGTERM: the parent ends the phase."""


# -- options and their checks ------------------------------------------------------------------
def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _positive(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1 (exclusive), got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in units else t
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes (e.g. 4096, 256MiB, 1GiB): {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        emit("error", error=f"{self.prog}: {message}")
        self.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuwait.selfcheck.workload", description="The PyTorch workloads of gpuwait selfcheck.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("probe", help="report PyTorch, the visible GPU and its UUID")
    run = sub.add_parser("run", help="run one phase until SIGTERM")
    run.add_argument("phase", choices=PHASES)
    run.add_argument("--counters", required=True, metavar="FILE", help="where the cumulative counters are written")
    run.add_argument("--batch-seconds", type=_positive, default=1.0, metavar="S",
                     help="few_workers, cpu_quota: CPU time one batch's decoding and augmentation costs one core")
    run.add_argument("--step-share", type=_fraction, default=0.25, metavar="F",
                     help="few_workers, cpu_quota, random_reads: the GPU step's length as a share of the time"
                          " between two batches the pipeline can deliver")
    run.add_argument("--workers", type=_count, default=1, metavar="N", help="few_workers, cpu_quota: DataLoader workers")
    run.add_argument("--copy-bytes", type=_bytes, default=256 << 20, metavar="SIZE",
                     help="pageable_copy: bytes of one copy to the GPU")
    run.add_argument("--copy-seconds", type=_positive, default=0.8, metavar="S",
                     help="pageable_copy: how long the copies of one step take (one batch copied in pieces of --copy-bytes)")
    run.add_argument("--compute-per-copy", type=_fraction, default=0.2, metavar="F",
                     help="pageable_copy: the GPU step's length as a share of the copy's")
    run.add_argument("--data-file", metavar="FILE", help="random_reads: the file to create and read (removed at exit)")
    run.add_argument("--file-bytes", type=_bytes, default=512 << 20, metavar="SIZE", help="random_reads: size of that file")
    run.add_argument("--record-bytes", type=_bytes, default=4096, metavar="SIZE",
                     help="random_reads: one record (a multiple of 4096, the alignment O_DIRECT needs)")
    run.add_argument("--readers", type=_count, default=4, metavar="N",
                     help="random_reads: threads reading at once (the queue of reads the device holds)")
    run.add_argument("--batch-read-seconds", type=_positive, default=1.0, metavar="S",
                     help="random_reads: how long the readers take to read one batch")
    run.add_argument("--layers", type=_count, default=32, metavar="N", help="tiny_kernels: layers of the batch-1 network")
    run.add_argument("--width", type=_count, default=256, metavar="N", help="tiny_kernels: width of each layer")
    run.add_argument("--launch-duty", type=_fraction, default=0.25, metavar="F",
                     help="tiny_kernels: share of the launching thread's time spent launching; it sleeps the rest")
    run.add_argument("--matmul-size", type=_count, default=8192, metavar="N", help="compute: size of the square matrices")
    return parser


def check(args: argparse.Namespace) -> None:
    """Checks that span options (each option's own range is its type's)."""
    if args.command != "run":
        return
    if args.phase == "random_reads":
        if not args.data_file:
            raise SetupError("random_reads needs --data-file: where to create the file it reads")
        if args.record_bytes % 4096:
            raise SetupError(f"--record-bytes must be a multiple of 4096 (O_DIRECT alignment), got {args.record_bytes}")
        if args.file_bytes < 64 * args.record_bytes:
            raise SetupError(f"--file-bytes ({args.file_bytes}) must hold at least 64 records of --record-bytes ({args.record_bytes})")
    if args.phase == "tiny_kernels" and args.width > 4096:
        raise SetupError(f"--width {args.width} is not a tiny kernel; keep it at 4096 or less")


# -- sizing: pure arithmetic on measured costs ----------------------------------------------------
@dataclass(frozen=True)
class PipelineSize:
    #: samples (or records) in one batch
    batch: int
    #: seconds the GPU step is sized to
    step_seconds: float


def size_decode_pipeline(sample_cpu_seconds: float, batch_seconds: float, step_share: float) -> PipelineSize:
    """One core makes a batch in ``batch_seconds``; the GPU step takes ``step_share`` of that,
    so a pipeline delivering one core's worth of batches keeps the GPU waiting the rest."""
    if not sample_cpu_seconds > 0:
        raise SetupError(f"decoding one sample measured {sample_cpu_seconds} s of CPU; cannot size the batch")
    batch = max(1, round(batch_seconds / sample_cpu_seconds))
    return PipelineSize(batch, step_share * batch * sample_cpu_seconds)


def size_read_pipeline(read_seconds: float, batch_read_seconds: float, readers: int, step_share: float,
                       max_records: int) -> PipelineSize:
    """``readers`` reading at once, each record taking ``read_seconds`` (measured alone), read
    a batch of this size in ``batch_read_seconds`` if the device serves a queue as fast as one
    read (longer if it does not); the GPU step takes ``step_share`` of that."""
    if not read_seconds > 0:
        raise SetupError(f"one record read measured {read_seconds} s; cannot size the batch")
    batch = min(max_records, max(16 * readers, math.ceil(readers * batch_read_seconds / read_seconds)))
    return PipelineSize(batch, step_share * batch * read_seconds / readers)


def matmul_count(step_seconds: float, matmul_seconds: float) -> int:
    if not matmul_seconds > 0:
        raise SetupError(f"one matrix product measured {matmul_seconds} s on the GPU; cannot size the step")
    return max(1, round(step_seconds / matmul_seconds))


def pause_after(launch_seconds: float, duty: float) -> float:
    """How long a thread that just launched for ``launch_seconds`` sleeps to be busy ``duty``
    of its time, however long the launch took (a busy host stretches it)."""
    return launch_seconds * (1.0 - duty) / duty


def filesystem_of(path: str, mountinfo: str) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount holding ``path``, from the text of
    /proc/self/mountinfo (proc(5): the mount point is field 5, the type follows the '-')."""
    best = ("", "")
    target = os.path.realpath(path)
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        fstype = fields[fields.index("-") + 1] if fields.index("-") + 1 < len(fields) else ""
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fstype)
    return best


# -- protocol ------------------------------------------------------------------------------
def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Counters:
    """Cumulative counters, rewritten whole (write, then rename) at most twice a second."""

    def __init__(self, path: str, every: float = 0.5) -> None:
        self.path = path
        self.every = every
        self.values: dict[str, float] = {}
        self._last = -math.inf

    def add(self, key: str, amount: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + amount

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"t": now, "counters": self.values}, f)
        os.replace(tmp, self.path)


def _import_torch():
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise SetupError(f"PyTorch is not installed for {sys.executable}: {INSTALL_HINT}") from None
        raise SetupError(f"PyTorch cannot be imported: {e}") from None
    except ImportError as e:
        raise SetupError(f"PyTorch cannot be imported: {e}") from None
    return torch


def _cuda(torch):
    if not torch.cuda.is_available():
        built = torch.version.cuda
        why = "it is built without CUDA" if not built else (
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}" if "CUDA_VISIBLE_DEVICES" in os.environ
            else "no driver or no device")
        raise SetupError(f"PyTorch {torch.__version__} sees no CUDA GPU ({why})")
    return torch.device("cuda", 0)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def gpu_uuid(raw) -> str | None:
    """The device's UUID as NVML writes it (``GPU-`` and the dashed hex), from what PyTorch's
    device properties give (an object whose text is the UUID, with or without the prefix, or
    whose ``bytes`` are its 16 bytes); None when neither is there."""
    if raw is None:
        return None
    text = str(raw)
    found = _UUID.search(text)
    if found is not None:
        return ("MIG-" if text.startswith("MIG-") else "GPU-") + found.group(0).lower()
    data = getattr(raw, "bytes", None)
    try:
        return f"GPU-{uuid.UUID(bytes=bytes(data))}" if data is not None else None
    except (TypeError, ValueError):
        return None


def describe_gpu(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "uuid": gpu_uuid(getattr(props, "uuid", None)), "torch": torch.__version__, "cuda": torch.version.cuda,
            "capability": list(torch.cuda.get_device_capability(0)), "memory_bytes": int(props.total_memory)}


def probe() -> dict:
    torch = _import_torch()
    _cuda(torch)
    return describe_gpu(torch)


# -- GPU helpers ------------------------------------------------------------------------------
def _half(torch):
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _blocking_event(torch, timing: bool = False):
    # cudaEventBlockingSync: a thread waiting on the event sleeps instead of spinning on a
    # core, so the host side of every phase uses the CPU only for what the phase does.
    return torch.cuda.Event(enable_timing=timing, blocking=True)


def gpu_seconds(torch, fn: Callable[[], object], repeats: int) -> float:
    """GPU time of one ``fn()``, by CUDA events around ``repeats`` of them after a warm-up."""
    for _ in range(3):
        fn()
    start, end = _blocking_event(torch, True), _blocking_event(torch, True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / repeats


class GpuStep:
    """A GPU step of about ``seconds``: products of square matrices that depend on the batch,
    so the step cannot start before the batch is on the GPU."""

    def __init__(self, torch, device, seconds: float) -> None:
        self.torch = torch
        dtype = _half(torch)
        self.a = torch.randn(STEP_MATMUL, STEP_MATMUL, device=device, dtype=dtype)
        self.b = torch.randn(STEP_MATMUL, STEP_MATMUL, device=device, dtype=dtype)
        self.out = torch.empty_like(self.a)
        self.matmul_seconds = gpu_seconds(torch, lambda: torch.matmul(self.a, self.b, out=self.out), 20)
        self.count = matmul_count(seconds, self.matmul_seconds)
        self.seconds = self.count * self.matmul_seconds
        self._pending = None

    def launch(self, batch) -> float | None:
        """Queues the step on ``batch``, then waits (sleeping) for the step before it, so at
        most one step is queued ahead of the GPU; returns that earlier step's GPU seconds."""
        torch = self.torch
        start, end = _blocking_event(torch, True), _blocking_event(torch, True)
        start.record()
        h = self.a + batch.float().mean().to(self.a.dtype)
        for _ in range(self.count):
            torch.matmul(h, self.b, out=self.out)
        end.record()
        previous, self._pending = self._pending, (start, end)
        return self._wait(previous)

    def finish(self) -> float | None:
        """Waits (sleeping) for the queued step; returns its GPU seconds."""
        pending, self._pending = self._pending, None
        return self._wait(pending)

    @staticmethod
    def _wait(events) -> float | None:
        if events is None:
            return None
        start, end = events
        end.synchronize()
        return start.elapsed_time(end) / 1000.0


# -- the phases ------------------------------------------------------------------------------
def _pipeline_loop(loader_iter, step: GpuStep, device, counters: Counters, amount_key: str, amount: int) -> None:
    while True:
        t = time.monotonic()
        batch = next(loader_iter)
        counters.add("data_wait_seconds", time.monotonic() - t)
        counters.add("batches", 1)
        counters.add(amount_key, amount)
        busy = step.launch(batch.to(device, non_blocking=True))
        if busy is not None:
            counters.add("gpu_busy_seconds", busy)
        counters.flush()


class DecodeDataset:
    """Compressed images decoded and augmented on the CPU, as an image pipeline does: zlib
    inflate, a random crop of 35-100% of the area resized to 224x224, a flip, brightness and
    contrast jitter, a 5x5 blur, and back to bytes (the GPU normalises)."""

    def __init__(self, records: list[bytes]) -> None:
        self.records = records

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, index: int):
        import torch
        import torch.nn.functional as F

        rng = random.Random(index)
        raw = zlib.decompress(self.records[index % len(self.records)])
        image = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(*IMAGE)
        _, h, w = IMAGE
        side = math.sqrt(rng.uniform(0.35, 1.0))
        ch, cw = int(h * side), int(w * side)
        top, left = rng.randrange(h - ch + 1), rng.randrange(w - cw + 1)
        x = image[:, top:top + ch, left:left + cw].unsqueeze(0).float()
        x = F.interpolate(x, size=(CROP, CROP), mode="bilinear", align_corners=False)
        if rng.random() < 0.5:
            x = x.flip(3)
        mean = x.mean()
        x = (x - mean) * rng.uniform(0.8, 1.2) + mean * rng.uniform(0.8, 1.2)
        g = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        kernel = (g[:, None] * g[None, :] / 256.0).expand(IMAGE[0], 1, 5, 5)
        x = F.conv2d(x, kernel, padding=2, groups=IMAGE[0])
        return x.clamp_(0, 255).to(torch.uint8).squeeze(0)


def make_decode_records(torch, count: int = DECODE_RECORDS) -> list[bytes]:
    """Images with the structure of photographs (smooth gradients with noise), compressed."""
    generator = torch.Generator().manual_seed(0)
    c, h, w = IMAGE
    ramp = torch.linspace(0, 1, w).expand(h, w) * torch.linspace(0.3, 1, h).unsqueeze(1)
    records = []
    for _ in range(count):
        tint = torch.rand(c, 1, 1, generator=generator)
        noise = torch.rand(c, h, w, generator=generator) * 0.15
        image = ((ramp * tint + noise).clamp(0, 1) * 255).to(torch.uint8)
        records.append(zlib.compress(bytes(image.flatten().tolist()), 6))
    return records


def decode_sample_seconds(torch, dataset: DecodeDataset, samples: int = 8) -> float:
    """CPU seconds one sample costs one thread, as in a DataLoader worker (one intra-op
    thread, torch.utils.data's worker setting)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dataset[0]
        costs = []
        for i in range(1, samples + 1):
            t = time.thread_time()
            dataset[i]
            costs.append(time.thread_time() - t)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(costs)


def run_compute(torch, args, counters: Counters) -> None:
    device = _cuda(torch)
    dtype = _half(torch)
    n = args.matmul_size
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty_like(a)
    one = gpu_seconds(torch, lambda: torch.matmul(a, b, out=out), 5)
    group = max(1, round(COMPUTE_GROUP_SECONDS / one))
    ready(torch, {"matmul_size": n, "dtype": str(dtype), "matmul_seconds": one, "group": group,
                  "tflops": 2 * n ** 3 / one / 1e12})
    pending = None
    while True:
        start, end = _blocking_event(torch, True), _blocking_event(torch, True)
        start.record()
        for _ in range(group):
            torch.matmul(a, b, out=out)
        end.record()
        if pending is not None:
            # One group stays queued behind the one running: the GPU never waits for the host.
            pending[1].synchronize()
            counters.add("gpu_busy_seconds", pending[0].elapsed_time(pending[1]) / 1000.0)
            counters.add("matmul_flops", 2 * n ** 3 * group)
            counters.flush()
        pending = (start, end)


def run_decode_pipeline(torch, args, counters: Counters) -> None:
    from torch.utils.data import DataLoader

    dataset = DecodeDataset(make_decode_records(torch))
    per_sample = decode_sample_seconds(torch, dataset)
    size = size_decode_pipeline(per_sample, args.batch_seconds, args.step_share)
    # The workers are forked before the CUDA context exists (a forked child cannot use its
    # parent's context); they never touch the GPU.
    loader = DataLoader(dataset, batch_size=size.batch, num_workers=args.workers, pin_memory=True,
                        prefetch_factor=2, multiprocessing_context="fork")
    batches = iter(loader)
    device = _cuda(torch)
    step = GpuStep(torch, device, size.step_seconds)
    ready(torch, {"workers": args.workers, "batch": size.batch, "sample_cpu_seconds": per_sample,
                  "batch_cpu_seconds": per_sample * size.batch, "step_seconds": step.seconds,
                  "step_matmuls": step.count})
    _pipeline_loop(batches, step, device, counters, "samples", size.batch)


def run_pageable_copy(torch, args, counters: Counters) -> None:
    device = _cuda(torch)
    source = torch.empty(args.copy_bytes, dtype=torch.uint8)  # pageable: not pinned
    source.random_(0, 256)  # touches every page, so no copy pays for first-touch faults
    target = torch.empty(args.copy_bytes, dtype=torch.uint8, device=device)
    copies = []
    for _ in range(4):
        t = time.perf_counter()
        target.copy_(source)
        copies.append(time.perf_counter() - t)
    one_copy = statistics.median(copies[1:])
    # One batch is copied in pieces, as a large batch is, for --copy-seconds.
    pieces = max(1, round(args.copy_seconds / one_copy))
    step = GpuStep(torch, device, args.compute_per_copy * pieces * one_copy)
    ready(torch, {"copy_bytes": args.copy_bytes, "pieces": pieces, "copy_seconds": pieces * one_copy,
                  "copy_bytes_per_second": args.copy_bytes / one_copy, "step_seconds": step.seconds,
                  "step_matmuls": step.count, "pinned": bool(source.is_pinned())})
    while True:
        t = time.perf_counter()
        for _ in range(pieces):
            # From pageable memory the driver stages the data through pinned buffers and the
            # call returns once it is staged (CUDA runtime API, "API synchronization behavior"),
            # so these calls are the transfer, and nothing else runs on the GPU meanwhile.
            target.copy_(source)
        counters.add("copy_seconds", time.perf_counter() - t)
        counters.add("copied_bytes", pieces * args.copy_bytes)
        counters.add("steps", 1)
        step.launch(target[:STEP_MATMUL])
        # Wait (sleeping) for this step before the next copy: a copy from pageable memory first
        # synchronises the stream, which would otherwise spin the core while the GPU computes.
        busy = step.finish()
        if busy is not None:
            counters.add("gpu_busy_seconds", busy)
        counters.flush()


class RandomRecords:
    """Records at random offsets of a file, read with the page cache bypassed (O_DIRECT) or
    dropped after each read (posix_fadvise DONTNEED), into a page-aligned buffer (what
    O_DIRECT needs), by ``readers`` threads at once: os.preadv releases the GIL, so the
    device holds ``readers`` reads in its queue."""

    def __init__(self, path: str, record_bytes: int, records: int, direct: bool, readers: int = 1) -> None:
        self.path, self.record_bytes, self.records, self.direct = path, record_bytes, records, direct
        self.readers = readers
        self.fd = open_records(path, direct)
        self._pool = None

    def read_into(self, buffer, slots: range, rng: random.Random) -> None:
        view = memoryview(buffer)
        size = self.record_bytes
        for j in slots:
            offset = rng.randrange(self.records) * size
            if os.preadv(self.fd, [view[j * size:(j + 1) * size]], offset) != size:
                raise OSError(f"short read at {offset} of {self.path}")
            if not self.direct:
                os.posix_fadvise(self.fd, offset, size, os.POSIX_FADV_DONTNEED)

    def start(self, buffer, batch: int, seed: int) -> list:
        """Starts reading ``batch`` records into ``buffer``; the futures finish when it is full."""
        from concurrent.futures import ThreadPoolExecutor

        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.readers, thread_name_prefix="reader")
        share = math.ceil(batch / self.readers)
        return [self._pool.submit(self.read_into, buffer, range(i, min(batch, i + share)), random.Random(seed * 1000 + i))
                for i in range(0, batch, share)]


def open_records(path: str, direct: bool) -> int:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    if not direct:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: each read is one record
    return fd


def data_file_chunks(size: int, chunk: int = 16 << 20, block: int = 4096):
    """``size`` bytes that no filesystem can compress or deduplicate: one random chunk, with
    each 4 KiB block's first 16 bytes made unique (its position in the file), repeated."""
    base = bytearray(os.urandom(min(chunk, size)))
    written = 0
    while written < size:
        n = min(len(base), size - written)
        for offset in range(0, n, block):
            base[offset:offset + 16] = (written + offset).to_bytes(16, "little")
        yield memoryview(base)[:n]
        written += n


def write_data_file(path: str, size: int) -> None:
    """Synced, then dropped from the page cache: clean pages are what POSIX_FADV_DONTNEED can
    drop (posix_fadvise(2))."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for data in data_file_chunks(size):
            while data:
                data = data[os.write(fd, data):]
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def supports_direct(path: str, record_bytes: int) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        os.preadv(fd, [mmap.mmap(-1, record_bytes)], 0)
        return True
    except OSError:
        return False  # EINVAL: the filesystem does not do direct IO
    finally:
        os.close(fd)


def run_random_reads(torch, args, counters: Counters) -> None:
    directory = os.path.dirname(os.path.abspath(args.data_file))
    with open("/proc/self/mountinfo") as f:
        point, fstype = filesystem_of(directory, f.read())
    if fstype in MEMORY_FILESYSTEMS:
        raise Skip(f"{directory} is on {fstype} ({point}): its file data lives in memory and no read reaches"
                   " a device; give --data-dir on the storage the training data lives on")
    write_data_file(args.data_file, args.file_bytes)
    direct = supports_direct(args.data_file, args.record_bytes)
    records = args.file_bytes // args.record_bytes
    reader = RandomRecords(args.data_file, args.record_bytes, records, direct, args.readers)
    probe = mmap.mmap(-1, args.record_bytes)
    rng = random.Random(1)
    latencies = []
    for _ in range(64):
        t = time.perf_counter()
        reader.read_into(probe, range(1), rng)
        latencies.append(time.perf_counter() - t)
    read_seconds = statistics.median(latencies)
    size = size_read_pipeline(read_seconds, args.batch_read_seconds, args.readers, args.step_share,
                              MAX_BATCH_BYTES // args.record_bytes)
    buffers = [mmap.mmap(-1, size.batch * args.record_bytes) for _ in range(2)]
    device = _cuda(torch)
    step = GpuStep(torch, device, size.step_seconds)
    ready(torch, {"readers": args.readers, "records_per_batch": size.batch, "record_bytes": args.record_bytes,
                  "file_bytes": args.file_bytes, "filesystem": fstype, "mount": point,
                  "cache": "O_DIRECT" if direct else "POSIX_FADV_DONTNEED after each read",
                  "read_seconds": read_seconds, "step_seconds": step.seconds, "step_matmuls": step.count})
    number = 0
    pending = reader.start(buffers[0], size.batch, number)
    while True:
        t = time.monotonic()
        for future in pending:
            future.result()
        counters.add("data_wait_seconds", time.monotonic() - t)
        counters.add("batches", 1)
        counters.add("records", size.batch)
        batch = torch.frombuffer(buffers[number % 2], dtype=torch.uint8).to(device)
        number += 1
        # The next batch is read while the GPU runs this one's step, as a prefetching loader does.
        pending = reader.start(buffers[number % 2], size.batch, number)
        busy = step.launch(batch)
        if busy is not None:
            counters.add("gpu_busy_seconds", busy)
        counters.flush()


def run_tiny_kernels(torch, args, counters: Counters) -> None:
    device = _cuda(torch)
    weights = [torch.randn(args.width, args.width, device=device) / math.sqrt(args.width) for _ in range(args.layers)]
    x = torch.randn(1, args.width, device=device)
    kernels = 2 * args.layers

    def request():
        h = x
        for w in weights:
            h = torch.relu(h @ w)
        return h

    launches = []
    for i in range(23):
        t = time.perf_counter()
        request()
        done = _blocking_event(torch)
        done.record()
        if i >= 3:
            launches.append(time.perf_counter() - t)
        done.synchronize()
    launch = statistics.median(launches)
    ready(torch, {"layers": args.layers, "width": args.width, "kernels_per_request": kernels,
                  "launch_seconds": launch, "period_seconds": launch + pause_after(launch, args.launch_duty),
                  "launch_duty": args.launch_duty})
    while True:
        t = time.perf_counter()
        request()
        done = _blocking_event(torch)
        done.record()
        launched = time.perf_counter() - t
        counters.add("launch_seconds", launched)
        counters.add("kernels", kernels)
        counters.add("requests", 1)
        done.synchronize()  # sleeps on the event: cudaEventBlockingSync
        rest = t + launched + pause_after(launched, args.launch_duty) - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
            counters.add("sleep_seconds", rest)
        counters.flush()


def run_idle_context(torch, args, counters: Counters) -> None:
    device = _cuda(torch)
    held = torch.zeros(1 << 20, device=device)
    torch.cuda.synchronize()
    ready(torch, {"held_bytes": held.numel() * held.element_size()})
    while True:
        time.sleep(0.5)
        counters.flush()


RUNNERS = {
    "compute": run_compute, "few_workers": run_decode_pipeline, "cpu_quota": run_decode_pipeline,
    "pageable_copy": run_pageable_copy, "random_reads": run_random_reads, "tiny_kernels": run_tiny_kernels,
    "idle_context": run_idle_context,
}


def ready(torch, setup: dict) -> None:
    info = describe_gpu(torch)
    emit("ready", pid=os.getpid(), uuid=info["uuid"], device=info["device"], setup=setup)


def _stop(_signum, _frame) -> None:
    raise Stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check(args)
        if args.command == "probe":
            emit("probe", **probe())
            return 0
        signal.signal(signal.SIGTERM, _stop)
        torch = _import_torch()
        counters = Counters(args.counters)
        counters.flush(force=True)
        try:
            RUNNERS[args.phase](torch, args, counters)
        except Stop:
            pass
        finally:
            counters.flush(force=True)
            if args.phase == "random_reads" and args.data_file:
                try:
                    os.unlink(args.data_file)
                except FileNotFoundError:
                    pass
        return 0
    except Skip as e:
        emit("skip", reason=str(e))
        return 0
    except SetupError as e:
        emit("error", error=str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
