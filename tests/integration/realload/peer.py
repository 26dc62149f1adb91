"""The other rank of the synthetic training loop: accepts one connection and echoes every
exchange back as it arrives, so each step's burst flows both ways at once, as in a ring
all-reduce's send and receive halves.

    python3 peer.py ADDRESS PORT [--pace BYTES_PER_SECOND]

Prints ``listening`` once the socket accepts connections. ``--pace`` holds the echo to a
link's bandwidth by the application itself, for when the traffic cannot be given a link of
its own to shape (loopback).
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time

HEADER = struct.Struct("!Q")


def recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def serve(conn: socket.socket, pace: float | None) -> None:
    chunk = bytearray(1 << 20)
    view = memoryview(chunk)
    while True:
        header = recv_exact(conn, HEADER.size)
        if header is None:
            return
        (remaining,) = HEADER.unpack(header)
        start, sent = time.monotonic(), 0
        while remaining:
            got = conn.recv_into(view, min(remaining, len(chunk)))
            if not got:
                return
            conn.sendall(view[:got])
            remaining -= got
            sent += got
            if pace:
                ahead = sent / pace - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("--pace", type=float, default=None)
    args = parser.parse_args(argv)
    with socket.create_server((args.address, args.port)) as server:
        print("listening", flush=True)
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            serve(conn, args.pace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
