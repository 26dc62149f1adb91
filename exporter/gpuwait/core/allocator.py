"""One malloc arena for the whole process, where the C library is glibc.

glibc gives each thread that allocates its own arena (up to eight per CPU), and an arena keeps
what was freed in it for its own thread's next allocations. The exporter's threads (one per
sampling schedule, the analysis, the HTTP server, a worker per GPU) each allocate the odd
buffer above pymalloc's 512 bytes (a file's content, a window's rows, a scrape's body), so
memory freed in one arena is not reused by the others: measured on the big bench node
(bench/compare.py's tree, 8 GPUs through the NVML double), the resident set kept growing by
about 0.5 MB every 20 s past the first minute with an arena per thread, and stayed flat, 3 MB
lower, with one. The threads take the GIL to allocate anyway, so one arena costs them no
waiting. ``MALLOC_ARENA_MAX`` in the environment does the same before the process starts;
this call is for the exporter started any other way.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("gpuwait.allocator")

#: mallopt's parameter for the number of arenas (glibc's malloc.h).
M_ARENA_MAX = -8


def limit_arenas(arenas: int = 1, library: str | None = None) -> bool:
    """Ask the C library for at most ``arenas`` malloc arenas; True when it agreed. Call it
    before the threads start: an arena, once made, stays. False, and nothing done, where the
    C library has no ``mallopt`` (musl) or refuses. ``library`` None: the symbols the process
    already has, the C library's among them."""
    try:
        libc = ctypes.CDLL(library)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no mallopt in the C library: malloc arenas left as they are")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_ARENA_MAX, arenas) == 1
