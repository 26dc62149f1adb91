"""A phase driver for ``gpuwait selfcheck`` that runs on the CPU, for the tests.

It speaks the driver protocol of gpuwait.selfcheck.workload (probe, run PHASE, JSON lines,
the counters file, SIGTERM) and, in place of a GPU, drives the NVML double: it writes the
double's machine (one GPU whose compute process is this process) to $GPUWAIT_NVML_DOUBLE
and appends the utilization each phase would give the GPU to the live log beside it. The
host side is real: decoding burns a core in a forked worker, copies burn the main thread,
the paced thread sleeps three quarters of its time, the idle process does nothing. Only the
GPU is a stand-in, so the exporter's verdict rests on real host evidence plus the double's
utilization.

$SELFCHECK_STANDIN_FAIL names a phase whose setup fails (exit 2, as a driver must);
$SELFCHECK_STANDIN_DRIVER=absent gives the double a machine whose driver is not loaded.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import zlib

import yaml

from gpuwait.selfcheck.workload import Counters, Stop, build_parser, emit, pause_after

UUID = "GPU-5e1fc4ec-0000-4c2b-9d3f-000000000000"
NAME = "NVIDIA H100 80GB HBM3"


def state_log() -> str:
    return os.environ["GPUWAIT_NVML_DOUBLE"] + ".state"


def gpu(value: str) -> None:
    with open(state_log(), "a") as f:
        f.write(f"{time.monotonic():.6f} {value}\n")


def write_machine() -> None:
    machine = {"count": 1, "gpus": {0: {
        "uuid": UUID, "name": NAME,
        "utilization": {"live": state_log(), "high": 0.97, "low": 0.0},
        "processes": [{"pid": os.getpid(), "used_memory": 2**30}],
    }}}
    if os.environ.get("SELFCHECK_STANDIN_DRIVER") == "absent":
        machine["init_error"] = "DRIVER_NOT_LOADED"
    open(state_log(), "w").close()
    path = os.environ["GPUWAIT_NVML_DOUBLE"]
    with open(path + ".tmp", "w") as f:
        yaml.safe_dump(machine, f)
    os.replace(path + ".tmp", path)


def decode_for(seconds: float) -> None:
    """Real CPU work: inflating compressed data until ``seconds`` of this thread's CPU."""
    blob = zlib.compress(bytes(range(256)) * 64)  # small pieces: the budget is kept to a fraction of a ms
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        zlib.decompress(blob)


def decode_worker(conn, batch_seconds: float) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        decode_for(batch_seconds)
        conn.send(b"batch")


def ready(setup: dict) -> None:
    emit("ready", pid=os.getpid(), uuid=UUID, device=NAME, setup=setup)


def run(args, counters: Counters) -> None:
    write_machine()
    phase = args.phase
    if phase in ("few_workers", "cpu_quota"):
        step = args.step_share * args.batch_seconds
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        workers = [ctx.Process(target=decode_worker, args=(send, args.batch_seconds), daemon=True) for _ in range(args.workers)]
        for w in workers:
            w.start()
        gpu("idle")
        ready({"workers": args.workers, "step_seconds": step})
        while True:
            t = time.monotonic()
            receive.recv()
            counters.add("data_wait_seconds", time.monotonic() - t)
            counters.add("batches", 1)
            gpu("busy")
            time.sleep(step)
            counters.add("gpu_busy_seconds", step)
            gpu("idle")
            counters.flush()
    if phase == "compute":
        gpu("busy")
        ready({})
        while True:
            time.sleep(0.5)
            counters.add("gpu_busy_seconds", 0.5)
            counters.flush()
    if phase == "pageable_copy":
        source = bytearray(os.urandom(1 << 20)) * 64
        gpu("idle")
        ready({"copy_bytes": len(source), "copy_seconds": args.copy_seconds})
        while True:
            t = time.perf_counter()
            copied = 0
            while time.perf_counter() - t < args.copy_seconds:
                bytes(source)  # the host side of a copy from pageable memory: the thread copies
                copied += len(source)
            copy = time.perf_counter() - t
            counters.add("copy_seconds", copy)
            counters.add("copied_bytes", copied)
            gpu("busy")
            time.sleep(args.compute_per_copy * copy)
            gpu("idle")
            counters.flush()
    if phase == "tiny_kernels":
        launch = 0.005
        gpu("idle")  # kernels this small leave the SMs idle
        ready({"launch_seconds": launch, "launch_duty": args.launch_duty})
        while True:
            t = time.perf_counter()
            decode_for(launch)
            launched = time.perf_counter() - t
            counters.add("launch_seconds", launched)
            counters.add("kernels", 64)
            time.sleep(pause_after(launched, args.launch_duty))
            counters.flush()
    if phase == "idle_context":
        gpu("idle")
        ready({})
        while True:
            time.sleep(0.5)
            counters.flush()


def _stop(_signum, _frame) -> None:
    raise Stop()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "probe":
        emit("probe", device=NAME, uuid=UUID, torch="stand-in", cuda=None, capability=[9, 0], memory_bytes=80 << 30)
        return 0
    if os.environ.get("SELFCHECK_STANDIN_FAIL") == args.phase:
        emit("error", error=f"stand-in: {args.phase} cannot be set up here")
        return 2
    if args.phase == "random_reads":
        emit("skip", reason="the stand-in reads no storage")
        return 0
    signal.signal(signal.SIGTERM, _stop)
    counters = Counters(args.counters)
    counters.flush(force=True)
    try:
        run(args, counters)
    except Stop:
        pass
    finally:
        counters.flush(force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
