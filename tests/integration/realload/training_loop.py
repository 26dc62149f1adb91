"""A synthetic training loop that puts real load on this host's kernel, step after step:

1. read  — read files of a data set from the real disk: with O_DIRECT and many threads, so
           every read goes to the block device and the requests queue there, or buffered
           (after the first step they come from the page cache);
2. decode — CPU-bound decompression on this one thread, for a given amount of CPU time;
3. compute — the GPU's turn: ``busy`` is appended to the state log the NVML test double
           reads, the loop waits for the "kernels" as the CUDA runtime would (spinning, by
           default), then ``idle``;
4. exchange — a burst to a peer rank and back over TCP (peer.py), like the all-reduce of
           the gradients.

    python3 training_loop.py --state LOG --data-dir DIR --peer ADDRESS:PORT [phase sizes]
                             [--workload-spool DIR]

Each step's phase durations go to stdout as one line of JSON. The process is the GPU's
compute process in the double's machine file, so the exporter attributes the GPU to it and
reads its CPU time and thread states from its real /proc/<pid>.

With ``--workload-spool`` the loop also reports its own timing through gpuwait.workload into
that spool, marked by hand as docs/workload.md shows for loops that do not iterate over a
loader: read and decode are its data phase, the GPU's turn its compute, the exchange its
communication, and each iteration a step.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import socket
import struct
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

HEADER = struct.Struct("!Q")


class StateLog:
    """Appends ``<CLOCK_MONOTONIC seconds> <state>`` lines: the double's live utilization."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def mark(self, state: str) -> None:
        os.write(self.fd, f"{time.monotonic():.6f} {state}\n".encode())


class DataSet:
    def __init__(self, directory: str, files: int, file_bytes: int, direct: bool, block: int, threads: int) -> None:
        self.paths = [os.path.join(directory, f"shard-{i:04d}.bin") for i in range(files)]
        self.file_bytes = file_bytes
        self.direct = direct
        self.block = block
        self.next = 0
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reader")
        self.threads = threads
        os.makedirs(directory, exist_ok=True)
        for path in self.paths:
            if not os.path.exists(path) or os.path.getsize(path) != file_bytes:
                with open(path, "wb") as f:
                    f.write(os.urandom(file_bytes))
                    f.flush()
                    os.fsync(f.fileno())

    def _read_file(self, path: str) -> int:
        if self.direct:
            # O_DIRECT wants buffers, offsets and lengths aligned to the logical block size;
            # an anonymous mmap is page aligned.
            buf = mmap.mmap(-1, self.block)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                checksum = 0
                for offset in range(0, self.file_bytes, self.block):
                    n = os.preadv(fd, [buf], offset)
                    checksum = zlib.crc32(buf[:64], checksum) if n else checksum
                return checksum
            finally:
                os.close(fd)
                buf.close()
        with open(path, "rb") as f:
            return zlib.crc32(f.read())

    def read(self, count: int) -> None:
        paths = [self.paths[(self.next + i) % len(self.paths)] for i in range(count)]
        self.next = (self.next + count) % len(self.paths)
        list(self.pool.map(self._read_file, paths))


def decoder(seconds: float):
    blob = zlib.compress(b"".join(i.to_bytes(4, "little") * 16 for i in range(16384)), 6)

    def decode() -> None:
        # A budget of this thread's CPU time: the same work whatever else runs on the host.
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            zlib.crc32(zlib.decompress(blob))

    return decode


def synchronize(seconds: float, how: str) -> None:
    """The host thread waiting for the GPU to finish the step's kernels. The CUDA runtime's
    default (cudaDeviceScheduleAuto) spins on a core while a process has no more contexts
    than the host has cores, which is the case of one GPU on this small host; ``block`` is
    cudaDeviceScheduleBlockingSync, the thread asleep until the device interrupts."""
    if how == "block":
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


class Exchange:
    def __init__(self, peer: str, nbytes: int) -> None:
        host, port = peer.rsplit(":", 1)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.sock = socket.create_connection((host, int(port)), timeout=30)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.nbytes = nbytes
        self.payload = memoryview(os.urandom(min(nbytes, 1 << 20)) if nbytes else b"")
        self.inbox = bytearray(1 << 20)

    def _send(self) -> None:
        self.sock.sendall(HEADER.pack(self.nbytes))
        left = self.nbytes
        while left:
            n = min(left, len(self.payload))
            self.sock.sendall(self.payload[:n])
            left -= n

    def run(self) -> None:
        sender = threading.Thread(target=self._send)
        sender.start()
        view = memoryview(self.inbox)
        left = self.nbytes
        while left:
            got = self.sock.recv_into(view, min(left, len(self.inbox)))
            if not got:
                raise ConnectionError("peer closed the connection")
            left -= got
        sender.join()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--state", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--peer", required=True, help="ADDRESS:PORT of peer.py")
    p.add_argument("--files", type=int, default=16, help="files in the data set")
    p.add_argument("--file-bytes", type=int, default=1 << 20)
    p.add_argument("--files-per-step", type=int, default=1)
    p.add_argument("--direct", action="store_true", help="read with O_DIRECT (else buffered, page-cached)")
    p.add_argument("--block", type=int, default=4096, help="bytes per O_DIRECT read")
    p.add_argument("--read-threads", type=int, default=1)
    p.add_argument("--decode-seconds", type=float, default=0.01)
    p.add_argument("--compute-seconds", type=float, default=0.4)
    p.add_argument("--sync", choices=("spin", "block"), default="spin",
                   help="how the host thread waits for the GPU's kernels (see synchronize)")
    p.add_argument("--exchange-bytes", type=int, default=65536)
    p.add_argument("--duration", type=float, default=300.0, help="stop after this long, whatever happens")
    p.add_argument("--workload-spool", help="report the loop's timing with gpuwait.workload into this spool directory")
    args = p.parse_args(argv)

    state = StateLog(args.state)
    data = DataSet(args.data_dir, args.files, args.file_bytes, args.direct, args.block, args.read_threads)
    decode = decoder(args.decode_seconds)
    exchange = Exchange(args.peer, args.exchange_bytes)
    if args.workload_spool:
        from gpuwait.client import Workload

        workload = Workload(spool=args.workload_spool)
        data_phase, compute_phase, comm_phase = workload.data, workload.compute, workload.comm
    else:
        workload = None
        data_phase = compute_phase = comm_phase = nullcontext
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    end = time.monotonic() + args.duration
    step = 0
    while time.monotonic() < end:
        t0 = time.monotonic()
        with data_phase():
            data.read(args.files_per_step)
            t1 = time.monotonic()
            decode()
        t2 = time.monotonic()
        with compute_phase():
            state.mark("busy")
            synchronize(args.compute_seconds, args.sync)
            state.mark("idle")
        t3 = time.monotonic()
        with comm_phase():
            exchange.run()
        t4 = time.monotonic()
        if workload is not None:
            workload.step(args.files_per_step)
        print(json.dumps({"step": step, "read": round(t1 - t0, 4), "decode": round(t2 - t1, 4),
                          "compute": round(t3 - t2, 4), "exchange": round(t4 - t3, 4)}), flush=True)
        step += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
