"""The cpu collector: /proc/stat parsing, the source on the fixture host, window statistics
and the samples it exposes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st
from hypothesis import settings as hypothesis_settings

from conftest import HOST_TREE
from fuzz import examples, only_parse_errors, texts
from gpuwait.collectors import cpu
from gpuwait.collectors.cpu import window
from gpuwait.collectors.cpu.parse import CPU_MODES, core_seconds, parse_proc_stat
from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.collectors.cpu.source import EXPORTED_MODES, CpuSource
from gpuwait.core.config import Settings
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.core.plugin import Snapshot
from gpuwait.core.reading import Reading
from gpuwait.core.ring import ColumnRing, WindowView
from gpuwait.core.source import HostPaths
from gpuwait.exposition.family import FamilyBuilder

FIXTURE_STAT = (HOST_TREE / "proc" / "stat").read_text()


# -- parser ----------------------------------------------------------------------------------


def test_parse_fixture_host():
    stat = parse_proc_stat(FIXTURE_STAT)
    assert sorted(stat.cpus) == ["0", "1", "2", "3", "cpu"]
    assert stat.cpus["2"] == dict(zip(CPU_MODES, (2901233, 1544, 512339, 27640211, 301223, 0, 8821, 0, 0, 0)))
    assert (stat.procs_running, stat.procs_blocked, stat.context_switches, stat.boot_time) == (3, 1, 1893422019, 1795950121)


def test_parse_kernel_that_prints_four_columns():
    # Kernels before 2.6 printed user nice system idle only; the later modes are simply absent.
    stat = parse_proc_stat("cpu  10 0 5 100\ncpu0 10 0 5 100\n")
    assert stat.cpus["0"] == {"user": 10, "nice": 0, "system": 5, "idle": 100}
    assert stat.procs_running is None and stat.procs_blocked is None


@pytest.mark.parametrize("text", [
    "", "intr 1 2\n", "cpu  1 2 3\n", "cpuX 1 2 3 4\n", "cpu0 1 2 -3 4\n", "cpu0 1 2 x 4\n",
    "cpu0 1 2 3 4\ncpu0 1 2 3 4\n",
])
def test_parse_rejects_a_file_without_one_good_cpu_line(text):
    with pytest.raises(ParseError):
        parse_proc_stat(text)


@pytest.mark.parametrize("bad_line, key", [
    ("cpu1 5 6\n", "cpu1"), ("cpu1 5 x 7 8\n", "cpu1"), ("cpu1 5 -6 7 8\n", "cpu1"),
    ("cpuX 1 2 3 4\n", "line 3"), ("procs_running\n", "procs_running"), ("procs_blocked two\n", "procs_blocked"),
])
def test_a_malformed_line_costs_its_own_series_only(bad_line, key):
    stat = parse_proc_stat("cpu  10 0 5 100\ncpu0 10 0 5 100\n" + bad_line + "cpu2 1 2 3 4\nprocs_running 3\nprocs_blocked 1\n")
    assert [k for k, _ in stat.bad_lines] == [key]
    assert stat.cpus["0"]["user"] == 10 and stat.cpus["2"]["idle"] == 4
    if key != "procs_running":
        assert stat.procs_running == 3


def test_a_core_listed_twice_is_dropped_and_named():
    stat = parse_proc_stat("cpu0 1 2 3 4\ncpu0 1 2 3 5\ncpu1 1 2 3 4\n")
    assert set(stat.cpus) == {"1"} and [k for k, _ in stat.bad_lines] == ["cpu0"]


def test_source_serves_the_other_cores_when_one_line_is_short(tmp_path):
    (tmp_path / "proc").mkdir()
    lines = (HOST_TREE / "proc" / "stat").read_text().splitlines(keepends=True)
    short = next(i for i, line in enumerate(lines) if line.startswith("cpu1 "))
    lines[short] = "cpu1 5 6\n"
    (tmp_path / "proc" / "stat").write_text("".join(lines))
    reading = CpuSource(HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys")), ticks_per_second=100).read()
    assert reading.errors == (f"parse:{tmp_path / 'proc' / 'stat'}:cpu1",)
    full = CpuSource(HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys")), ticks_per_second=100).read()
    assert set(reading.data.cores) == set(full.data.cores) - {"1"}


@hypothesis_settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_single_line_corruption_loses_at_most_that_lines_series(data):
    lines = (HOST_TREE / "proc" / "stat").read_text().splitlines()
    full = parse_proc_stat("\n".join(lines))
    index = data.draw(st.integers(0, len(lines) - 1))
    old = lines[index]
    lines[index] = data.draw(st.text(st.characters(codec="ascii", exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85"), max_size=40))
    # The lines the corruption touches: the one it replaced and the one its text now claims to be.
    claimed = {(parts[0][3:] or "cpu") for parts in (old.split(), lines[index].split()) if parts and parts[0].startswith("cpu")}
    stat = parse_proc_stat("\n".join(lines))
    assert set(full.cpus) - set(stat.cpus) <= claimed
    for name in (set(full.cpus) & set(stat.cpus)) - claimed:
        assert stat.cpus[name] == full.cpus[name]


def _careful(text: str, ticks_per_second: float = 100.0):
    """What the careful parser and the conversion of ticks give for ``text``."""
    stat = parse_proc_stat(text)
    cores = {cpu: {mode: ticks / ticks_per_second for mode, ticks in zip(EXPORTED_MODES, modes.values())}
             for cpu, modes in stat.cpus.items() if cpu != "cpu"}
    return cores, stat.procs_running, stat.procs_blocked, stat.bad_lines


def test_the_single_pass_reads_the_usual_file_as_the_careful_parser_does():
    for text in (FIXTURE_STAT, "cpu  10 0 5 100\ncpu0 10 0 5 100\n",
                 "cpu0 1 2 3 4 5 6 7 8 9 10 11 12\nprocs_running 7\n"):
        cores, running, blocked, bad = _careful(text, 250)
        assert bad == () and core_seconds(text, EXPORTED_MODES, 250) == (cores, running, blocked)


def test_lines_neither_parser_reads_are_passed_over_whatever_their_length():
    # A big node's intr line holds a count per IRQ number (thousands); lines may be indented,
    # which the single pass leaves to the careful parser where it is a cpu line.
    intr = "intr 99 " + " ".join(str(i % 7) for i in range(4000))
    text = f"cpu  10 0 5 100\ncpu0 10 0 5 100\n{intr}\n\tprocs_running 4\nsoftirq 1 2 3\n"
    cores, running, blocked, bad = _careful(text, 100)
    assert bad == () and cores == {"0": dict(zip(EXPORTED_MODES, (0.1, 0.0, 0.05, 1.0)))} and running == 4
    assert core_seconds(text, EXPORTED_MODES, 100) == (cores, running, blocked)
    indented = text.replace("\ncpu0", "\n cpu0")
    assert _careful(indented, 100) == (cores, running, blocked, ()) and core_seconds(indented, EXPORTED_MODES, 100) is None
    assert parse_proc_stat(text.replace("intr 99 ", "intr x ")).bad_lines == ()


@pytest.mark.parametrize("text", [
    "cpu0 1 2 -3 4\n", "cpu0 1 2 x 4\n", "cpu0 1 2 3\n", "cpuX 1 2 3 4\n", "cpu0 1 2 3 4\ncpu0 1 2 3 4\n",
    "cpu0 1 2 3 4\nprocs_running\n", "cpu0 1 2 3 4\nprocs_blocked 1 2\n", "intr 1 2\n", "",
    "cpu 1 2\ncpu0 1 2 3 4\n", "cpu 1 2 3 4\ncpu 1 2 3 4\ncpu0 1 2 3 4\n", "cpu0 1 2 3 4 5 6 7 8 9 x\n",
    "cpu0 1 2 3 4 5 6 7 8 x\n", "cpu0 1 2 3 4 5 6 7 8 +9\n",
    "cpu0 1 2 3 4\nctxt many\n",
    # a line of the width of the cpu lines above a core's, named by a number
    "cpu 1 2 3 4\n12345 1 2 3 4\ncpu0 1 2 3 4\n", "12345 1 2 3 4\ncpu0 1 2 3 4\n",
    # a line one column short next to one a column long
    "cpu 1 2 3 4 5\ncpu0 1 2 3 4\ncpu1 1 2 3 4 5 6\n",
])
def test_the_single_pass_leaves_every_unusual_file_to_the_careful_parser(text):
    assert core_seconds(text, EXPORTED_MODES, 100) is None


@hypothesis_settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_single_pass_never_differs_from_the_careful_parser(data):
    lines = FIXTURE_STAT.splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    lines[index] = data.draw(st.text(st.characters(codec="ascii", exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85"), max_size=40))
    text = "\n".join(lines)
    fast = core_seconds(text, EXPORTED_MODES, 100)
    if fast is not None:
        cores, running, blocked, bad = _careful(text)
        assert bad == ()
        assert fast == (cores, running, blocked)


@st.composite
def _proc_stats(draw):
    """A /proc/stat as a kernel prints it (every cpu line first, one width from 4 to 12
    columns, the run-queue lines after a long intr line), then maybe one change a kernel would
    not make: a cpu line one column short or long, a cpu line moved below the others, the
    all-CPU line moved down, a carriage return or a form feed inside the cpu block, a cpu
    line listed twice, a name that is not a core's or none, a number that is not one."""
    cores = draw(st.integers(1, 12))
    width = draw(st.integers(4, 12))
    ticks = st.integers(0, 10**12)
    lines = [f"cpu{name} " + " ".join(str(draw(ticks)) for _ in range(width))
             for name in [""] * draw(st.booleans()) + [str(i) for i in range(cores)]]
    rest = ["intr 1 " + " ".join(str(draw(st.integers(0, 9))) for _ in range(draw(st.integers(0, 300)))),
            f"ctxt {draw(ticks)}", f"procs_running {draw(ticks)}", f"procs_blocked {draw(ticks)}", "softirq 1 2 3"]
    change = draw(st.sampled_from(["none", "short", "long", "moved", "all_down", "cr", "ff", "twice", "name", "number"]))
    at = draw(st.integers(0, len(lines) - 1))
    if change == "short" and width > 4:
        lines[at] = lines[at].rsplit(" ", 1)[0]
    elif change == "long":
        lines[at] += " 7"
    elif change == "moved":
        rest.insert(draw(st.integers(0, len(rest))), lines.pop(at))
    elif change == "all_down" and lines[0].startswith("cpu "):
        lines.append(lines.pop(0))
    elif change in ("cr", "ff"):
        cut = draw(st.integers(0, len(lines[at])))
        lines[at] = lines[at][:cut] + ("\r" if change == "cr" else "\x0c") + lines[at][cut:]
    elif change == "twice":
        lines.insert(at, lines[at])
    elif change == "name":
        lines[at] = draw(st.sampled_from(["cpuX", "cpu", "cpu1cpu", "xcpu1", "cpu01", "12345", ""])) + lines[at][lines[at].index(" "):]
    elif change == "number":
        parts = lines[at].split(" ")
        parts[draw(st.integers(1, len(parts) - 1))] = draw(st.sampled_from(["x", "1.5", "+3", "1_0", ""]))
        lines[at] = " ".join(parts)
    return "\n".join(lines + rest) + "\n", change


@hypothesis_settings(max_examples=500, deadline=None)
@given(_proc_stats(), st.sampled_from([100, 250, 1000]))
def test_the_single_pass_reads_what_the_careful_parser_reads_or_leaves_it_the_file(drawn, ticks_per_second):
    text, change = drawn
    fast = core_seconds(text, EXPORTED_MODES, ticks_per_second)
    if change == "none":
        assert fast is not None  # the shape every kernel prints is the single pass's to read
    if fast is not None:
        cores, running, blocked, bad = _careful(text, ticks_per_second)
        assert bad == ()
        assert fast == (cores, running, blocked)
        assert list(fast[0]) == list(cores) and [list(modes) for modes in fast[0].values()] == [list(m) for m in cores.values()]


@hypothesis_settings(max_examples=200, deadline=None)
@given(_proc_stats())
def test_a_table_reading_and_its_trace_give_the_window_the_same_floats(drawn):
    """A live reading holds a CoreTable, its trace line the mappings it stands for: the ring
    gets the same row from both, to the last bit, however the sums round."""
    text, _ = drawn
    fast = core_seconds(text, EXPORTED_MODES, 3)  # thirds do not add up exactly
    if fast is None:
        return
    table, running, blocked = fast
    live = window.columns(CpuData(table, running, blocked))
    replayed = window.columns(CpuData({c: dict(m) for c, m in table.items()}, running, blocked))
    assert list(live.keys()) == list(replayed.keys())
    assert all(a == b for a, b in zip(live.values(), replayed.values()))


def test_the_ring_takes_a_table_row_as_it_takes_the_mapping():
    texts = [f"cpu0 {10 * i} 0 {i} {100 - i} 1\ncpu1 {i} {i} 0 {50 + i} 0\nprocs_running {i}\nprocs_blocked 1\n"
             for i in range(7)]
    by_row, by_dict = ColumnRing(4), ColumnRing(4)
    for i, text in enumerate(texts):
        table, running, blocked = core_seconds(text, EXPORTED_MODES, 100)
        row = window.columns(CpuData(table, running, blocked))
        assert type(row).__name__ == "ColumnRow"
        by_row.append(i * 0.1, row)
        by_dict.append(i * 0.1, dict(row))
        a, b = by_row.view(), by_dict.view()
        assert list(a.columns) == list(b.columns) and a.times == b.times
        assert all(list(a.columns[k]) == list(b.columns[k]) for k in a.columns)
        assert all(a.increase(k) == b.increase(k) for k in a.columns)
    # A core appearing changes the keys: the ring widens and goes on taking rows.
    table, running, blocked = core_seconds("cpu0 1000 0 9 100 1\ncpu1 9 9 0 59 0\ncpu2 1 1 1 1 1\n", EXPORTED_MODES, 100)
    by_row.append(0.8, window.columns(CpuData(table, running, blocked)))
    view = by_row.view()
    assert list(view.columns[("busy", "2")])[-1] == pytest.approx(0.03)
    assert all(math.isnan(v) for v in list(view.columns[("busy", "2")])[:-1])


# -- source ----------------------------------------------------------------------------------


def test_source_converts_ticks_to_seconds_and_drops_the_all_cpu_line():
    reading = CpuSource(HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys")), ticks_per_second=100).read()
    assert reading.source == "cpu" and reading.errors == ()
    data = reading.data
    assert sorted(data.cores) == ["0", "1", "2", "3"]
    assert data.cores["0"]["user"] == pytest.approx(18392.01)
    assert data.cores["0"]["softirq"] == pytest.approx(183.21)
    # guest time is inside user and nice already: it is not a mode of its own
    assert "guest" not in data.cores["0"] and "guest_nice" not in data.cores["0"]
    assert (data.procs_running, data.procs_blocked) == (3, 1)


@pytest.mark.parametrize("columns", [4, 5, 7, 8, 9, 10, 11])
def test_source_keeps_the_modes_the_kernel_prints_whatever_their_number(tmp_path, columns):
    """Kernels before 2.6.33 print fewer columns, later ones may print more: each core has
    exactly the exported modes its line holds, each its own column."""
    (tmp_path / "proc").mkdir()
    ticks = [100 * (i + 1) for i in range(columns)]
    (tmp_path / "proc" / "stat").write_text(
        f"cpu  {' '.join(map(str, ticks))}\ncpu0 {' '.join(map(str, ticks))}\nprocs_running 1\n")
    modes = CpuSource(HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys")), ticks_per_second=100).read().data.cores["0"]
    assert modes == {mode: float(i + 1) for i, mode in enumerate(EXPORTED_MODES[:columns])}


def test_source_missing_and_garbage_files_are_source_errors(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    source = CpuSource(HostPaths(str(proc), str(tmp_path / "sys")))
    with pytest.raises(SourceError) as missing:
        source.read()
    assert missing.value.cause == f"missing:{proc}/stat"
    (proc / "stat").write_text("garbage\n")
    with pytest.raises(SourceError) as garbage:
        source.read()
    assert garbage.value.cause == f"parse:{proc}/stat"


# -- window ----------------------------------------------------------------------------------


def _ring(samples: list[CpuData], step: float = 0.1):
    ring = ColumnRing(len(samples) + 1)
    for i, data in enumerate(samples):
        ring.append(i * step, window.columns(data))
    return ring.view()


def _core(busy: float, idle: float) -> dict[str, float]:
    return {"user": busy, "idle": idle, "iowait": 0.0}


def test_window_busy_ratio_saturated_cores_and_run_queue():
    # core 0 fully busy, core 1 busy a quarter of the time, core 2 idle (iowait is not busy)
    samples = [CpuData({"0": _core(0.1 * i, 0.0), "1": _core(0.025 * i, 0.075 * i), "2": {"user": 0.0, "iowait": 0.1 * i}},
                       procs_running=2 + i % 2, procs_blocked=i % 3)
               for i in range(5)]
    stats = window.summarize(_ring(samples), Settings({}))
    assert stats.busy_ratio == {"0": pytest.approx(1.0), "1": pytest.approx(0.25), "2": 0.0}
    assert stats.saturated_cores == 1
    assert stats.busy_max_ratio == pytest.approx(1.0)
    assert stats.busy_mean_ratio == pytest.approx(1.25 / 3)
    assert (stats.procs_running_mean, stats.procs_running_max) == (pytest.approx(2.4), 3.0)
    assert (stats.procs_blocked_mean, stats.procs_blocked_max) == (pytest.approx(0.8), 2.0)


def test_window_saturation_threshold_is_the_option():
    samples = [CpuData({"0": _core(0.09 * i, 0.01 * i)}, None, None) for i in range(3)]
    view = _ring(samples)
    assert window.summarize(view, Settings({})).saturated_cores == 0  # 0.9 < 0.95 by default
    lower = Settings({window.SATURATION_THRESHOLD.name: 0.9})
    assert window.summarize(view, lower).saturated_cores == 1


def test_window_with_one_sample_has_no_ratio():
    stats = window.summarize(_ring([CpuData({"0": _core(1.0, 1.0)}, 1, 0)]), Settings({}))
    assert stats.busy_ratio == {} and stats.saturated_cores is None and stats.busy_mean_ratio is None


def test_saturated_cores_per_interval_for_the_verdict():
    # core 0 saturated in the second interval only; core 1 never
    samples = [CpuData({"0": _core(b, 0.1 * i - b), "1": _core(0.0, 0.1 * i)}, None, 0)
               for i, b in enumerate((0.0, 0.0, 0.1, 0.1))]
    counts = window.saturated_cores(_ring(samples), 0.9)
    assert counts.times == pytest.approx([0.0, 0.1, 0.2])
    assert counts.values == [0.0, 1.0, 0.0]



@given(busy=st.lists(st.lists(st.sampled_from([0.0, 0.05, 0.09, 0.1]), min_size=3, max_size=3), min_size=2, max_size=30),
       capacity=st.integers(2, 8))
def test_saturated_cores_counted_pass_by_pass_as_from_scratch(busy, capacity):
    # Each pass counts only its new intervals and reuses the ring's memo for the others; a
    # copy of the same view without a ring computes every interval.
    ring = ColumnRing(capacity)
    totals = {c: [0.0, 0.0] for c in "012"}
    for i, shares in enumerate(busy):
        for c, share in zip("012", shares):
            totals[c][0] += share
            totals[c][1] += 0.1 - share
        ring.append(i * 0.1, window.columns(CpuData({c: _core(*totals[c]) for c in "012"}, None, 0)))
        view = ring.view()
        plain = WindowView(view.times, {k: view.columns[k] for k in view.columns})
        for level in (0.5, 0.9):
            assert window.saturated_cores(view, level) == window.saturated_cores(plain, level)


# -- exposition ------------------------------------------------------------------------------


def test_expose_maps_reading_and_window_to_the_catalog():
    data = CpuSource(HostPaths(str(HOST_TREE / "proc"), "/sys"), ticks_per_second=100).read().data
    view = _ring([data, data])
    stats = window.summarize(view, Settings({}))
    builder = FamilyBuilder()
    builder.extend(cpu.COLLECTOR.expose({"cpu": Snapshot(Reading("cpu", 0.0, data), stats)}, Settings({})))
    families = {f.name: f for f in builder.families()}
    seconds = {(s.labels["cpu"], s.labels["mode"]): s.value for s in families["gpuwait_cpu_seconds"].samples}
    assert seconds[("3", "system")] == pytest.approx(3770.01)
    assert len(seconds) == 4 * 8
    assert families["gpuwait_procs_blocked"].samples[0].value == 1.0
    # No time passed between the two readings: there is no busy ratio to publish.
    assert "gpuwait_cpu_window_busy_ratio" not in families
    assert "gpuwait_cpu_window_saturated_cores" not in families
    assert stats.busy_mean_ratio is None


# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("procstat"))
def test_proc_stat(text):
    only_parse_errors(parse_proc_stat, text)
