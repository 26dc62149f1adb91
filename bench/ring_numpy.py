"""Would numpy pay for itself in the window rings? Its import (time and resident memory), and
the ring's two hot steps done with numpy and with ``array('d')`` as core/ring.py does them:
appending a 192-core row (386 columns) with the columns that did not step forward found,
and a view's copy with a tenth of its columns taken out. Microseconds per step, one thread.

    python3 bench/ring_numpy.py

numpy is not one of gpuwait's dependencies; this needs it installed. Not a test.
"""

from __future__ import annotations

import operator
import time
import timeit
from array import array
from itertools import compress

CAPACITY, WIDTH = 601, 386


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def main() -> None:
    before, started = rss_mb(), time.perf_counter()
    import numpy as np

    print(f"import numpy {np.__version__}: {1000 * (time.perf_counter() - started):.0f} ms, "
          f"resident memory +{rss_mb() - before:.1f} MB")
    values = {i: 1.0 + i for i in range(WIDTH)}
    keys = list(values)
    rows = np.zeros((CAPACITY, WIDTH))
    flat = array("d", [0.0]) * (CAPACITY * WIDTH)

    def numpy_append():
        row = np.fromiter(map(values.get, keys), float, WIDTH)
        rows[5] = row
        return np.flatnonzero(~(rows[4] <= row))

    def array_append():
        row = array("d", map(values.get, keys))
        flat[5 * WIDTH:6 * WIDTH] = row
        return list(compress(range(WIDTH), map(operator.not_, map(operator.le, flat[4 * WIDTH:5 * WIDTH], row))))

    def numpy_view():
        copy = rows.copy()
        return [copy[:, i].copy() for i in range(0, WIDTH, 10)]

    def array_view():
        copy = flat[:]
        return [copy[i::WIDTH] for i in range(0, WIDTH, 10)]

    for name, step in (("append, numpy", numpy_append), ("append, array", array_append),
                       ("view, numpy", numpy_view), ("view, array", array_view)):
        print(f"{name:14s} {timeit.timeit(step, number=500) / 500 * 1e6:7.1f} µs")


if __name__ == "__main__":
    main()
