"""What one sampler tick costs: each registered source's read, its columns, and the window
analysis, on this machine's /proc and /sys and on the fixture host tree.

    python3 bench/sampler_tick.py [--iterations 2000] [--tree real|fixture|both]

Times are microseconds of wall time (median and p90 over the iterations) and, for the tick
total, CPU time of the measuring thread. Each figure is also given as a ratio to a reference
measured in the same run, a bare ``open('/proc/stat').read()``, so that figures from a noisy
or slower machine can still be compared with each other. Not a test: it asserts nothing.

The GPU sources read this machine's NVML in both runs: the fixture tree holds only procfs and
sysfs. On a machine without a driver they show the cost of finding no backend.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "exporter"))

from gpuwait.core.plugin import AnalysisInputs  # noqa: E402
from gpuwait.core.registry import registry, resolve  # noqa: E402
from gpuwait.core.errors import NoData, SourceError  # noqa: E402
from gpuwait.core.ring import ColumnRing  # noqa: E402

FIXTURE_TREE = REPO / "tests" / "fixtures" / "host"


def measure(fn: Callable[[], object], iterations: int) -> tuple[list[float], list[float]]:
    """(wall µs, thread CPU µs) of each call; the collector is off so its pauses land nowhere."""
    walls, cpus = [], []
    perf, cpu = time.perf_counter_ns, time.thread_time_ns
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(iterations):
            c0, w0 = cpu(), perf()
            fn()
            w1, c1 = perf(), cpu()
            walls.append((w1 - w0) / 1000.0)
            cpus.append((c1 - c0) / 1000.0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return walls, cpus


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(0.9 * len(ordered))) - 1)]


def reference(iterations: int) -> float:
    def bare_read() -> None:
        with open("/proc/stat") as f:
            f.read()

    measure(bare_read, min(200, iterations))
    walls, _ = measure(bare_read, iterations)
    return statistics.median(walls)


class Table:
    def __init__(self, ref_us: float) -> None:
        self.ref_us = ref_us
        self.rows: list[tuple[str, str, str, str, str, str]] = []

    def add(self, what: str, walls: list[float] | None, cpus: list[float] | None = None, note: str = "") -> None:
        if not walls:
            self.rows.append((what, "-", "-", "-", "-", note))
            return
        median = statistics.median(walls)
        cpu = f"{statistics.median(cpus):.1f}" if cpus else "-"
        self.rows.append((what, f"{median:.1f}", f"{p90(walls):.1f}", cpu, f"{median / self.ref_us:.2f}", note))

    def print(self) -> None:
        header = ("step", "median µs", "p90 µs", "cpu µs", "x ref", "note")
        widths = [max(len(r[i]) for r in [header, *self.rows]) for i in range(len(header))]
        for row in [header, tuple("-" * w for w in widths), *self.rows]:
            cells = (cell.rjust(w) if 0 < i < 5 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            print("  ".join(cells).rstrip())


@dataclass
class Totals:
    tick_cpu: dict[str, float] = field(default_factory=lambda: {"fast": 0.0, "slow": 0.0})
    tick_wall: dict[str, float] = field(default_factory=lambda: {"fast": 0.0, "slow": 0.0})
    analysis_cpu: float = 0.0
    #: Cross-source analyses may run less often than every analysis pass.
    cross_cpu_per_second: float = 0.0


def bench_source(spec, settings, iterations: int, table: Table, totals: Totals, views: dict, stats: dict,
                 latest: dict) -> None:
    try:
        source = spec.factory(settings)
    except Exception as e:  # one source that cannot start must not hide the others
        table.add(f"{spec.name}: start", None, note=f"{type(e).__name__}: {e}")
        return
    try:
        _bench_started_source(spec, source, settings, iterations, table, totals, views, stats, latest)
    finally:
        source.close()


def _bench_started_source(spec, source, settings, iterations, table, totals, views, stats, latest) -> None:
    tier = spec.tier or source.tier
    interval = settings.slow_interval if tier == "slow" else settings.sample_interval
    try:
        reading = source.read()
    except (SourceError, NoData) as e:
        outcome = "no data" if isinstance(e, NoData) else "fails"
        table.add(f"{spec.name}: read [{tier}]", *measure(partial(_read_or_none, source), iterations),
                  note=f"{outcome}: {e.cause}")
        return
    latest[spec.name] = reading
    note = f"{len(reading.errors)} part(s) failing, e.g. {reading.errors[0]}" if reading.errors else ""
    r_wall, r_cpu = measure(source.read, iterations)
    table.add(f"{spec.name}: read [{tier}]", r_wall, r_cpu, note)
    step_cpu, step_wall = statistics.median(r_cpu), statistics.median(r_wall)
    if spec.rows is None and spec.columns is None:
        totals.tick_cpu[tier] += step_cpu
        totals.tick_wall[tier] += step_wall
        return

    c_wall, c_cpu = measure(partial(_rows_of, spec, reading), iterations)
    width = sum(len(values) for _, values in _rows_of(spec, reading))
    table.add(f"{spec.name}: columns", c_wall, c_cpu, f"{width} values per sample")
    totals.tick_cpu[tier] += step_cpu + statistics.median(c_cpu)
    totals.tick_wall[tier] += step_wall + statistics.median(c_wall)

    capacity = max(2, int(math.ceil(settings.analysis_window / interval)) + 1)
    ring = ColumnRing(capacity)
    # A full window of real reads, stamped one interval apart as the sampler would; bounded,
    # since a source may give no row at all (no device, no new driver samples).
    t = time.monotonic() - settings.analysis_window
    for _ in range(4 * capacity):
        if len(ring) >= capacity:
            break
        try:
            rows = _rows_of(spec, source.read())
        except (SourceError, NoData):
            continue
        for _, values in rows:
            ring.append(t, values)
            t += interval
    if len(ring) < 2:
        table.add(f"{spec.name}: window", None, note="no rows to analyse")
        return
    # Appending to a full ring evicts a row too, which is what every sample past the first
    # window costs the sampler.
    last_values = values
    clock = [t]

    def append() -> None:
        ring.append(clock[0], last_values)
        clock[0] += interval

    p_wall, p_cpu = measure(append, iterations)
    table.add(f"{spec.name}: ring append [{tier}]", p_wall, p_cpu, f"{len(last_values)} columns, full ring")
    totals.tick_cpu[tier] += statistics.median(p_cpu)
    totals.tick_wall[tier] += statistics.median(p_wall)
    repeats = max(5, iterations // 100)
    a_wall, a_cpu = measure(ring.view, repeats)
    table.add(f"{spec.name}: window view", a_wall, a_cpu, f"{len(ring)} rows")
    view = ring.view()
    views[spec.name] = view
    totals.analysis_cpu += statistics.median(a_cpu)
    if spec.summarize is not None:
        s_wall, s_cpu = measure(partial(spec.summarize, view, settings), repeats)
        table.add(f"{spec.name}: summarize", s_wall, s_cpu, f"{len(ring)} rows")
        totals.analysis_cpu += statistics.median(s_cpu)
        stats[spec.name] = spec.summarize(view, settings)


def bench_tree(label: str, procfs: str, sysfs: str, iterations: int, ref_us: float) -> None:
    collectors = registry()
    flags = [f"--path.procfs={procfs}", f"--path.sysfs={sysfs}", *(f"--collector.{c.name}" for c in collectors)]
    settings, _ = resolve(flags)
    print(f"\n## {label}: --path.procfs={procfs} --path.sysfs={sysfs}")
    print(f"reference: open('/proc/stat').read() = {ref_us:.1f} µs median\n")

    table = Table(ref_us)
    totals = Totals()
    views, stats, latest = {}, {}, {}
    for collector in collectors:
        for spec in collector.sources:
            bench_source(spec, settings, iterations, table, totals, views, stats, latest)
    repeats = max(5, iterations // 100)
    inputs = AnalysisInputs(views=views, stats=stats, latest=latest, end=time.monotonic())
    for collector in collectors:
        if collector.analyse is None:
            continue
        every = settings[collector.analyse_every] if collector.analyse_every else settings["analysis.interval"]
        try:
            x_wall, x_cpu = measure(partial(collector.analyse, inputs, settings), repeats)
        except Exception as e:  # report it, and go on with the rest of the table
            table.add(f"{collector.name}: cross-source analysis", None, note=f"fails: {type(e).__name__}: {e}")
            continue
        table.add(f"{collector.name}: cross-source analysis", x_wall, x_cpu, f"every {every:g}s")
        totals.cross_cpu_per_second += statistics.median(x_cpu) / every
    table.print()

    fast_hz = 1.0 / settings.sample_interval
    slow_hz = 1.0 / settings.slow_interval
    analysis_hz = 1.0 / settings["analysis.interval"]
    analysis_cpu = totals.analysis_cpu
    share = (totals.tick_cpu["fast"] * fast_hz + totals.tick_cpu["slow"] * slow_hz + analysis_cpu * analysis_hz
             + totals.cross_cpu_per_second) / 1e6
    print()
    print(f"fast-tier tick (read, columns and ring append, all fast sources): {totals.tick_wall['fast']:.1f} µs wall,"
          f" {totals.tick_cpu['fast']:.1f} µs CPU = {totals.tick_wall['fast'] / ref_us:.1f} x ref")
    print(f"  at {fast_hz:g} Hz: {totals.tick_cpu['fast'] * fast_hz / 1e4:.2f}% of one core")
    print(f"slow-tier tick: {totals.tick_cpu['slow']:.1f} µs CPU,"
          f" at {slow_hz:g} Hz: {totals.tick_cpu['slow'] * slow_hz / 1e4:.3f}% of one core")
    print(f"window analysis pass: {analysis_cpu / 1000:.2f} ms CPU, every {settings['analysis.interval']:g}s:"
          f" {analysis_cpu * analysis_hz / 1e4:.2f}% of one core")
    print(f"cross-source analyses: {totals.cross_cpu_per_second / 1e4:.2f}% of one core")
    print(f"sampling and analysis together: {share * 100:.2f}% of one core (scrapes not included)")


def _read_or_none(source) -> None:
    try:
        source.read()
    except (SourceError, NoData):
        pass


def _rows_of(spec, reading):
    if spec.rows is not None:
        return list(spec.rows(reading))
    return [(reading.t, spec.columns(reading.data))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000, help="reads timed per source (default 2000)")
    parser.add_argument("--tree", choices=("real", "fixture", "both"), default="both")
    parser.add_argument("--procfs", default="/proc", help="procfs of the 'real' run")
    parser.add_argument("--sysfs", default="/sys", help="sysfs of the 'real' run")
    args = parser.parse_args()
    # Sources log once per cause (a missing device, no GPU driver); one line each, marked as such.
    logging.basicConfig(level=logging.WARNING, format="note: %(name)s: %(message)s")

    print(f"gpuwait sampler tick, {args.iterations} iterations, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs,"
          f" load average {os.getloadavg()[0]:.2f}")
    ref_us = reference(args.iterations)
    if args.tree in ("real", "both"):
        bench_tree("this machine", args.procfs, args.sysfs, args.iterations, ref_us)
    if args.tree in ("fixture", "both"):
        bench_tree("fixture host", str(FIXTURE_TREE / "proc"), str(FIXTURE_TREE / "sys"), args.iterations, ref_us)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
