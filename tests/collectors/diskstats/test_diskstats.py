"""The diskstats collector: parser for every kernel layout, source, window statistics and the
exporter serving them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conftest import HOST_TREE, TEXT_FIXTURES, text_fixture
from fuzz import examples, only_parse_errors, texts
from gpuwait.core.registry import resolve
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.collectors.diskstats import COLLECTOR
from gpuwait.collectors.diskstats.parse import (BASE_FIELDS, DISCARD_FIELDS, FLUSH_FIELDS, _named_lines,
                                                device_table, parse_diskstats, parse_diskstats_line)
from gpuwait.collectors.diskstats.payload import DiskCounters, Diskstats
from gpuwait.core.ring import ColumnRing, WindowView
from gpuwait.core.sampler import Sampler
from gpuwait.core.source import HostPaths
from gpuwait.collectors.diskstats.source import DEFAULT_DEVICE_EXCLUDE, DiskstatsSource
from gpuwait.collectors.diskstats import window as disk_stats
from host_collectors import copy_procfs, exporter_args, exposed, promtool_problems, rewrite
from single_pass import NOT_COUNTERS, careful, drawn_change, assert_read_alike_or_left, assert_same_as_careful, assert_same_window_row
from support import ExporterProcess, value

EXCLUDE = re.compile(DEFAULT_DEVICE_EXCLUDE)

# -- parser ------------------------------------------------------------------------------------

DEVICES = {
    "4.15.txt": ["loop0", "loop1", "loop2", "loop3", "sda", "sda1", "sda14", "sda15", "sdb", "sr0"],
    "4.19.txt": ["nvme0n1", "nvme0n1p1", "nvme0n1p2", "nvme1n1", "nvme1n1p1", "md0", "sda", "sda1"],
    "5.10.txt": ["loop0", "loop1", "nvme0n1", "nvme0n1p1", "nvme0n1p2", "dm-0", "nvme1n1", "nvme2n1", "md127"],
    "6.8.txt": ["loop0", "loop1", "loop2", "zram0", "nvme0n1", "nvme0n1p1", "nvme0n1p2", "nvme1n1", "nvme2n1",
                "nvme3n1", "md127", "dm-0"],
}

#: One device per layout, every field spelled out from the fixture line.
EXPECTED = {
    # 8 16 sdb 5213044 1230 2669082880 42119300 118 12 3344 902 3 6221040 42120210
    ("4.15.txt", "sdb"): DiskCounters(
        8, 16, 5213044, 1230, 2669082880 * 512, 42119.3, 118, 12, 3344 * 512, 0.902, 3, 6221.04, 42120.21),
    # 259 0 nvme0n1 1822044 2190 233018842 412330 9120475 6271020 1132904772 6620185 0 4102120 7032992 211 0 191281152 1840
    ("4.19.txt", "nvme0n1"): DiskCounters(
        259, 0, 1822044, 2190, 233018842 * 512, 412.33, 9120475, 6271020, 1132904772 * 512, 6620.185, 0, 4102.12,
        7032.992, 211, 0, 191281152 * 512, 1.84),
    # md devices account no times before md learnt IO accounting
    ("4.19.txt", "md0"): DiskCounters(
        9, 0, 3608711, 0, 462838420 * 512, 0.0, 15391450, 0, 1132904704 * 512, 0.0, 0, 0.0, 0.0, 0, 0, 0, 0.0),
    # 259 0 nvme0n1 4721093 81220 612993402 1410322 22090114 13802201 2118003214 17820199 0 12991020 19447410
    #   1840 0 402653184 9018 1201211 207871
    ("5.10.txt", "nvme0n1"): DiskCounters(
        259, 0, 4721093, 81220, 612993402 * 512, 1410.322, 22090114, 13802201, 2118003214 * 512, 17820.199, 0,
        12991.02, 19447.41, 1840, 0, 402653184 * 512, 9.018, 1201211, 207.871),
    # 9 127 md127 273609423 0 70043832576 104891120 264036 0 67592448 361207 48 9944120 105252327 0 0 0 0 0 0
    ("6.8.txt", "md127"): DiskCounters(
        9, 127, 273609423, 0, 70043832576 * 512, 104891.12, 264036, 0, 67592448 * 512, 361.207, 48, 9944.12,
        105252.327, 0, 0, 0, 0.0, 0, 0.0),
    ("6.8.txt", "zram0"): DiskCounters(
        252, 0, 3401, 0, 27208 * 512, 0.004, 19233, 0, 153864 * 512, 0.061, 0, 0.112, 0.065, 0, 0, 0, 0.0, 0, 0.0),
}


def test_every_fixture_has_expectations():
    assert sorted(p.name for p in (TEXT_FIXTURES / "diskstats").iterdir()) == sorted(DEVICES)


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_parse_fixture_devices(name):
    stats = parse_diskstats(text_fixture("diskstats", name))
    assert list(stats.devices) == DEVICES[name]
    assert stats.malformed == ()


@pytest.mark.parametrize("name,device", sorted(EXPECTED))
def test_parse_fixture_values(name, device):
    assert parse_diskstats(text_fixture("diskstats", name)).devices[device] == EXPECTED[(name, device)]


@pytest.mark.parametrize("name,discards,flushes", [
    ("4.15.txt", False, False), ("4.19.txt", True, False), ("5.10.txt", True, True), ("6.8.txt", True, True),
])
def test_parse_layouts(name, discards, flushes):
    for counters in parse_diskstats(text_fixture("diskstats", name)).devices.values():
        assert (counters.discards_completed is not None) == discards
        assert (counters.discard_time_seconds is not None) == discards
        assert (counters.flushes_completed is not None) == flushes
        assert (counters.flush_time_seconds is not None) == flushes


def test_parse_keeps_known_fields_of_a_longer_line():
    line = " 259       0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19\n"
    counters = parse_diskstats(line).devices["nvme0n1"]
    assert (counters.reads_completed, counters.flush_time_seconds) == (1, 0.017)


def test_parse_default_exclude():
    kept = parse_diskstats(text_fixture("diskstats", "6.8.txt"), lambda d: EXCLUDE.search(d) is None)
    assert list(kept.devices) == ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "md127", "dm-0"]


@pytest.mark.parametrize("line", [
    "   8       0 sda 1 2 3 4 5 6 7 8 9 10\n",  # 13 columns
    "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12\n",  # 15 columns: no kernel prints it
    "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",  # 19 columns
    "   8       0 sda 1 2 3 -4 5 6 7 8 9 10 11\n",
    "   8       0 sda 1 2 3 4 5 6 7 8 9 10 1e3\n",
    "   8       0 sda 1 2 3 4 5 6 7 8 9 10 18446744073709551616\n",
    "   8       x sda 1 2 3 4 5 6 7 8 9 10 11\n",
    "   8       0\n",
    "   8       0 sda1 12 34 56 78\n",  # 2.6 kernels' short partition lines
])
def test_parse_malformed_line_alone_raises(line):
    with pytest.raises(ParseError):
        parse_diskstats(line)


def test_parse_malformed_line_costs_only_its_device():
    text = text_fixture("diskstats", "5.10.txt").replace(" nvme1n1 34060511 ", " nvme1n1 x4060511 ")
    stats = parse_diskstats(text)
    assert stats.malformed == ("nvme1n1",)
    assert "nvme1n1" not in stats.devices and "nvme2n1" in stats.devices


def test_parse_unnamed_line_is_malformed():
    stats = parse_diskstats(text_fixture("diskstats", "4.15.txt") + "   8\n")
    assert stats.malformed == ("line 11",)
    assert len(stats.devices) == 10


def test_parse_duplicate_device_dropped():
    line = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n"
    stats = parse_diskstats(line + line + line + "   8      16 sdb 1 2 3 4 5 6 7 8 9 10 11\n")
    assert list(stats.devices) == ["sdb"] and stats.malformed == ("sda",)


def test_parse_excluded_lines_are_not_parsed():
    stats = parse_diskstats("   7       0 loop0 garbage\n   8       0 sda 1 2 3 4 5 6 7 8 9 10 11\n", lambda d: d != "loop0")
    assert list(stats.devices) == ["sda"] and stats.malformed == ()


def test_parse_empty():
    assert parse_diskstats("").devices == {}


def _check_parse(text: str) -> None:
    try:
        stats = parse_diskstats(text)
    except ParseError:
        return
    assert not (set(stats.devices) & set(stats.malformed))
    for counters in stats.devices.values():
        assert counters.read_bytes % 512 == 0 and counters.read_time_seconds >= 0.0


@given(st.text())
def test_fuzz_any_text(text):
    _check_parse(text)


_TOKEN = st.one_of(
    st.sampled_from(["0", " ", "\n", "\t", "-1", "nvme0n1", "1.5", "18446744073709551616", "\x00", "٣"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=4),
)


@given(st.sampled_from(sorted(DEVICES)), st.data())
def test_fuzz_near_valid(name, data):
    """A real file with a few spans replaced by likely tokens."""
    text = text_fixture("diskstats", name)
    for _ in range(data.draw(st.integers(1, 5))):
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 16)))
        text = text[:start] + data.draw(_TOKEN) + text[end:]
    _check_parse(text)


@given(st.lists(st.lists(st.one_of(st.integers(0, 2**65).map(str), st.sampled_from(["sda", "md0", "-", ""])),
                         min_size=0, max_size=22), max_size=6))
def test_fuzz_structured(lines):
    _check_parse("\n".join(" ".join(tokens) for tokens in lines))



# -- the single pass -----------------------------------------------------------------------------


def _careful(text: str, keep=None):
    return careful(_named_lines(text), parse_diskstats_line, keep, "device")


def _keep(name: str) -> bool:
    return EXCLUDE.search(name) is None


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_the_single_pass_reads_every_fixture_as_the_careful_parser_does(name):
    text = text_fixture("diskstats", name)
    for keep in (None, _keep):
        assert_same_as_careful(device_table(text, keep), _careful(text, keep))


@pytest.mark.parametrize("text", [
    "", "\n", "8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n\n8 16 sdb 1 2 3 4 5 6 7 8 9 10 11\n",
    # one line of another layout, a line of a layout no kernel prints, a later kernel's longer line
    "8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n8 16 sdb 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n",
    "8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12\n", "8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n",
    "8 0 sda 1 2 3 4 5 6 7 8 9 10 x\n", "8 0 sda 1 2 3 4 5 6 7 8 9 10 +11\n", "8 0 sda 1 2 3 4 5 6 7 8 9 10 -1\n",
    "8 0 sda 1 2 3 4 5 6 7 8 9 10 1.5\n", f"8 0 sda 1 2 3 4 5 6 7 8 9 10 {2**64}\n",
    "8 0 sda 1 2 3 4 5 6 7 8 9 10 000000000000000000011\n", "8 0 sda 1 2 3 4 5 6 7 8 9 10 \u0661\n",
    "8 0 sd\u00e4 1 2 3 4 5 6 7 8 9 10 11\n",
    "8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n",
    # a name missing on one line and a column too many on the next: the right number of tokens
    "8 0 1 2 3 4 5 6 7 8 9 10 11\n8 16 sdb 1 2 3 4 5 6 7 8 9 10 11 12\n",
])
def test_the_single_pass_leaves_every_unusual_file_to_the_careful_parser(text):
    assert device_table(text) is None


@st.composite
def _diskstats(draw):
    """A /proc/diskstats as a kernel prints it (one layout for every line, names of disks,
    partitions, loop and md devices, counters up to 64 bits), then maybe one change a kernel
    would not make: a line a column short or long, a blank line, a carriage return or a form
    feed inside a line, a line listed twice, a name that is missing or not ASCII, a number
    that is not one."""
    fields = draw(st.sampled_from([BASE_FIELDS, DISCARD_FIELDS, FLUSH_FIELDS]))
    pool = ["sda", "sda1", "nvme0n1", "nvme0n1p1", "nvme1n1", "md127", "dm-0", "loop0", "zram0", "sr0", "vdb", "12"]
    names = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=8, unique=True))
    counter = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 10**6), st.just(0))
    lines = [f"{draw(st.integers(0, 4095)):>4} {draw(st.integers(0, 2**20)):>7} {name} "
             + " ".join(str(draw(counter)) for _ in range(fields)) for name in names]
    change, at = drawn_change(draw, lines, ["cr", "ff", "no_name", "name", "number"])
    if change in ("cr", "ff"):
        cut = draw(st.integers(0, len(lines[at])))
        lines[at] = lines[at][:cut] + ("\r" if change == "cr" else "\x0c") + lines[at][cut:]
    elif change == "no_name":
        lines[at] = lines[at].replace(f" {names[at]} ", " ", 1)
    elif change == "name":
        other = draw(st.sampled_from(["sd\u00e4", "\u0661"]))
        lines[at] = lines[at].replace(f" {names[at]} ", f" {other} ", 1)
    elif change == "number":
        parts = lines[at].split()
        parts[draw(st.sampled_from([0, 1, *range(3, len(parts))]))] = draw(st.sampled_from(NOT_COUNTERS))
        lines[at] = " ".join(parts)
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""])), change


@hypothesis_settings(max_examples=500, deadline=None)
@given(_diskstats(), st.booleans())
def test_the_single_pass_reads_what_the_careful_parser_reads_or_leaves_it_the_file(drawn, excluding):
    text, change = drawn
    keep = _keep if excluding else None
    table = device_table(text, keep)
    assert_read_alike_or_left(table, lambda: _careful(text, keep), change)
    if table is not None:
        assert parse_diskstats(text, keep) == Diskstats(table)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_single_pass_never_differs_from_the_careful_parser(data):
    lines = text_fixture("diskstats", data.draw(st.sampled_from(sorted(DEVICES)))).splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    lines[index] = data.draw(st.text(st.characters(codec="ascii"), max_size=60))
    text = "\n".join(lines)
    assert_read_alike_or_left(device_table(text), lambda: _careful(text), "changed")


@hypothesis_settings(max_examples=200, deadline=None)
@given(_diskstats())
def test_a_table_reading_and_its_trace_give_the_window_the_same_row(drawn):
    assert_same_window_row(disk_stats.columns, Diskstats, device_table(drawn[0]))

# -- source ------------------------------------------------------------------------------------


def _source(tmp_path, text: str | None, exclude: str = DEFAULT_DEVICE_EXCLUDE) -> DiskstatsSource:
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    if text is not None:
        (proc / "diskstats").write_text(text)
    return DiskstatsSource(HostPaths(str(proc), str(tmp_path / "sys")), re.compile(exclude))


def test_source_host_tree():
    source = DiskstatsSource(HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys")), EXCLUDE)
    reading = source.read()
    assert reading.source == "diskstats" and reading.errors == ()
    assert list(reading.data.devices) == ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "md0"]
    md0 = reading.data.devices["md0"]
    assert (md0.reads_completed, md0.read_bytes, md0.io_now) == (360995103, 92414902272 * 512, 62)


def test_source_option_changes_exclusion(tmp_path):
    source = _source(tmp_path, text_fixture("diskstats", "4.15.txt"), r"^(loop|sr)\d+$")
    assert list(source.read().data.devices) == ["sda", "sda1", "sda14", "sda15", "sdb"]


def test_source_missing_file(tmp_path):
    with pytest.raises(SourceError) as e:
        _source(tmp_path, None).read()
    assert e.value.cause == f"missing:{tmp_path}/proc/diskstats"


def test_source_garbage_file(tmp_path):
    with pytest.raises(SourceError) as e:
        _source(tmp_path, "this is not\ndiskstats at all\n").read()
    assert e.value.cause == f"parse:{tmp_path}/proc/diskstats"


def test_source_bad_line_drops_only_its_device(tmp_path):
    text = text_fixture("diskstats", "6.8.txt").replace(" nvme2n1 91203102 98 ", " nvme2n1 91203102 ")
    reading = _source(tmp_path, text).read()
    assert reading.errors == (f"parse:{tmp_path}/proc/diskstats:nvme2n1",)
    assert list(reading.data.devices) == ["nvme0n1", "nvme1n1", "nvme3n1", "md127", "dm-0"]


def test_sampler_counts_the_bad_line_each_read(tmp_path):
    _source(tmp_path, text_fixture("diskstats", "6.8.txt").replace(" md127 273609423 ", " md127 -273609423 "))
    sampler = Sampler([COLLECTOR], resolve([f"--path.procfs={tmp_path / 'proc'}"])[0])
    state = sampler.states["diskstats"]
    for reads in (1, 2):
        sampler.sample_once(state)
        assert state.up and state.errors == reads
    assert list(state.latest.data.devices) == ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "dm-0"]
    assert state.logged_partial == {f"parse:{tmp_path}/proc/diskstats:md127"}
    assert state.active_causes == set()  # the source itself is up


# -- window statistics -----------------------------------------------------------------------


def _counters(reads=0, read_bytes=0, read_time=0.0, writes=0, write_bytes=0, write_time=0.0,
              io_now=0, io_time=0.0, weighted=0.0) -> DiskCounters:
    return DiskCounters(259, 0, reads, 0, read_bytes, read_time, writes, 0, write_bytes, write_time,
                        io_now, io_time, weighted)


def _view(samples: list[tuple[float, dict[str, DiskCounters]]]) -> WindowView:
    ring = ColumnRing(len(samples) + 1)
    for t, devices in samples:
        ring.append(t, disk_stats.columns(Diskstats(devices)))
    return ring.view()


def test_window_known_answers():
    # nvme1n1 over 0.3 s: 300 reads of 128 KiB taking 0.6 s in all; 30 writes of 4 KiB;
    # in flight the whole window at depth 2, 3, then 1.
    d = [
        _counters(reads=1000, read_bytes=1000 * 131072, read_time=10.0, writes=50, write_bytes=50 * 4096,
                  write_time=1.0, io_now=2, io_time=100.0, weighted=500.0),
        _counters(reads=1100, read_bytes=1100 * 131072, read_time=10.2, writes=60, write_bytes=60 * 4096,
                  write_time=1.01, io_now=3, io_time=100.1, weighted=500.2),
        _counters(reads=1200, read_bytes=1200 * 131072, read_time=10.4, writes=70, write_bytes=70 * 4096,
                  write_time=1.02, io_now=1, io_time=100.2, weighted=500.5),
        _counters(reads=1300, read_bytes=1300 * 131072, read_time=10.6, writes=80, write_bytes=80 * 4096,
                  write_time=1.03, io_now=0, io_time=100.3, weighted=500.6),
    ]
    view = _view([(0.1 * i, {"nvme1n1": c}) for i, c in enumerate(d)])
    s = disk_stats.summarize(view, None).devices["nvme1n1"]
    assert s.queue_depth_mean == pytest.approx(0.6 / 0.3)
    assert s.queue_depth_max == pytest.approx(3.0)
    assert s.in_flight_max == 3.0
    assert s.read_await_seconds == pytest.approx(0.6 / 300)
    assert s.write_await_seconds == pytest.approx(0.03 / 30)
    assert s.reads_per_second == pytest.approx(1000.0)
    assert s.writes_per_second == pytest.approx(100.0)
    assert s.read_bytes_per_second == pytest.approx(1000.0 * 131072)
    assert s.write_bytes_per_second == pytest.approx(100.0 * 4096)
    assert s.read_request_size_bytes == pytest.approx(131072.0)
    assert s.write_request_size_bytes == pytest.approx(4096.0)
    assert s.utilization_ratio == pytest.approx(1.0)


def test_window_idle_device_has_no_await_or_request_size():
    c = _counters(reads=5, read_bytes=5 * 4096, read_time=0.01)
    s = disk_stats.summarize(_view([(0.0, {"sda": c}), (0.1, {"sda": c}), (0.2, {"sda": c})]), None).devices["sda"]
    assert s.read_await_seconds is None and s.read_request_size_bytes is None
    assert s.reads_per_second == 0.0 and s.queue_depth_mean == 0.0 and s.utilization_ratio == 0.0


def test_window_counter_reset_gives_no_negative_rate():
    # The device is re-created between the 2nd and 3rd sample: its counters start over.
    samples = [
        (0.0, {"sdb": _counters(reads=5000, read_bytes=5000 * 8192, read_time=50.0, io_time=80.0, weighted=120.0)}),
        (0.1, {"sdb": _counters(reads=5100, read_bytes=5100 * 8192, read_time=50.1, io_time=80.05, weighted=120.1)}),
        (0.2, {"sdb": _counters(reads=10, read_bytes=10 * 8192, read_time=0.01, io_time=0.01, weighted=0.02)}),
        (0.3, {"sdb": _counters(reads=110, read_bytes=110 * 8192, read_time=0.11, io_time=0.06, weighted=0.12)}),
    ]
    s = disk_stats.summarize(_view(samples), None).devices["sdb"]
    assert s.reads_per_second == pytest.approx(1000.0)
    assert s.read_bytes_per_second == pytest.approx(1000.0 * 8192)
    assert s.read_await_seconds == pytest.approx(0.001)
    assert s.read_request_size_bytes == pytest.approx(8192.0)
    assert s.queue_depth_mean == pytest.approx(1.0) and s.queue_depth_max == pytest.approx(1.0)
    assert s.utilization_ratio == pytest.approx(0.5)
    assert min(v for v in (s.reads_per_second, s.queue_depth_max, s.utilization_ratio)) >= 0.0


def test_window_time_field_wrap_is_unwrapped():
    # The kernel's millisecond fields are 32-bit: 4294967.295 s is followed by a small value.
    top = (1 << 32) / 1000.0
    samples = [
        (0.0, {"nvme0n1": _counters(reads=100, read_time=top - 0.05, weighted=top - 0.1)}),
        (0.1, {"nvme0n1": _counters(reads=200, read_time=0.05, weighted=0.1)}),
    ]
    s = disk_stats.summarize(_view(samples), None).devices["nvme0n1"]
    assert s.read_await_seconds == pytest.approx(0.1 / 100)
    assert s.queue_depth_mean == pytest.approx(2.0)


def test_window_await_skips_an_interval_where_only_the_count_reset():
    # Re-created while its read time was past half the 32-bit range: alone, the time field's
    # drop looks like a wrap; the read count's drop shows it was a reset, so the interval
    # counts for neither.
    top = (1 << 32) / 1000.0
    samples = [
        (0.0, {"sdb": _counters(reads=7000, read_time=top - 100.0)}),
        (0.1, {"sdb": _counters(reads=7100, read_time=top - 99.9)}),
        (0.2, {"sdb": _counters(reads=3, read_time=0.006)}),
        (0.3, {"sdb": _counters(reads=103, read_time=0.106)}),
    ]
    s = disk_stats.summarize(_view(samples), None).devices["sdb"]
    assert s.read_await_seconds == pytest.approx(0.001)


def test_window_device_vanishing_mid_window():
    a = [_counters(reads=100 * i, read_bytes=100 * i * 4096, read_time=0.02 * i, io_now=i) for i in range(5)]
    b = [_counters(writes=10 * i, write_bytes=10 * i * 65536, write_time=0.01 * i) for i in range(5)]
    samples = [(0.1 * i, {"nvme1n1": a[i], "nvme2n1": b[i]} if i < 2 else {"nvme1n1": a[i]}) for i in range(5)]
    stats = disk_stats.summarize(_view(samples), None)
    assert sorted(stats.devices) == ["nvme1n1", "nvme2n1"]
    gone = stats.devices["nvme2n1"]
    assert gone.writes_per_second == pytest.approx(100.0)
    assert gone.write_request_size_bytes == pytest.approx(65536.0)
    assert gone.write_await_seconds == pytest.approx(0.001)
    stays = stats.devices["nvme1n1"]
    assert stays.reads_per_second == pytest.approx(1000.0) and stays.in_flight_max == 4.0


def test_window_device_appearing_mid_window():
    c = [_counters(reads=50 * i, read_bytes=50 * i * 512) for i in range(4)]
    samples = [(0.1 * i, {"sdc": c[i]} if i >= 2 else {}) for i in range(4)]
    s = disk_stats.summarize(_view(samples), None).devices["sdc"]
    assert s.reads_per_second == pytest.approx(500.0) and s.read_request_size_bytes == pytest.approx(512.0)


# -- the exporter process --------------------------------------------------------------------


def _grow(text: str, device: str, reads: int, sectors: int, read_ms: int, weighted_ms: int) -> str:
    """The fixture text with one device's read counters (and its queue time) increased."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts[2] == device:
            v = [int(p) for p in parts[3:]]
            v[0] += reads
            v[2] += sectors
            v[3] += read_ms
            v[9] += read_ms
            v[10] += weighted_ms
            line = "%4s %7s %s " % tuple(parts[:3]) + " ".join(map(str, v))
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.integration
def test_exporter_serves_diskstats(tmp_path):
    proc = copy_procfs(tmp_path)
    path = proc / "diskstats"
    with ExporterProcess(exporter_args(proc)) as exp:
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_disk_window_queue_depth_mean", device="md0") is not None else None)
        assert {lbl["device"] for lbl, _ in samples["gpuwait_disk_reads_completed_total"]} == {
            "nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "md0"}
        # 259 0 nvme0n1 1520374 40112 190221448 611203 8820155 4412019 771209344 7102211 1 5120344 7857846
        #   2201 0 209715200 4410 902211 140022
        n = {"device": "nvme0n1"}
        assert exposed(samples, "gpuwait_disk_reads_completed_total", **n) == 1520374
        assert exposed(samples, "gpuwait_disk_reads_merged_total", **n) == 40112
        assert exposed(samples, "gpuwait_disk_read_bytes_total", **n) == 190221448 * 512
        assert exposed(samples, "gpuwait_disk_read_time_seconds_total", **n) == 611.203
        assert exposed(samples, "gpuwait_disk_writes_completed_total", **n) == 8820155
        assert exposed(samples, "gpuwait_disk_writes_merged_total", **n) == 4412019
        assert exposed(samples, "gpuwait_disk_write_bytes_total", **n) == 771209344 * 512
        assert exposed(samples, "gpuwait_disk_write_time_seconds_total", **n) == 7102.211
        assert exposed(samples, "gpuwait_disk_io_now", **n) == 1
        assert exposed(samples, "gpuwait_disk_io_time_seconds_total", **n) == 5120.344
        assert exposed(samples, "gpuwait_disk_io_time_weighted_seconds_total", **n) == 7857.846
        assert exposed(samples, "gpuwait_disk_discards_completed_total", **n) == 2201
        assert exposed(samples, "gpuwait_disk_discards_merged_total", **n) == 0
        assert exposed(samples, "gpuwait_disk_discard_bytes_total", **n) == 209715200 * 512
        assert exposed(samples, "gpuwait_disk_discard_time_seconds_total", **n) == 4.41
        assert exposed(samples, "gpuwait_disk_flushes_completed_total", **n) == 902211
        assert exposed(samples, "gpuwait_disk_flush_time_seconds_total", **n) == 140.022
        assert exposed(samples, "gpuwait_disk_window_in_flight_max", device="md0") == 62
        assert exposed(samples, "gpuwait_disk_window_reads_per_second", device="md0") == 0.0
        assert value(samples, "gpuwait_disk_window_read_await_seconds", device="md0") is None

        # 4000 reads of 256 KiB (512 sectors) on md0, taking 8 s in all: 2 ms each.
        rewrite(path, _grow(path.read_text(), "md0", 4000, 4000 * 512, 8000, 8000))
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_disk_window_read_await_seconds", device="md0") is not None else None)
        assert exposed(samples, "gpuwait_disk_reads_completed_total", device="md0") == 360995103 + 4000
        assert exposed(samples, "gpuwait_disk_window_read_await_seconds", device="md0") == pytest.approx(0.002)
        assert exposed(samples, "gpuwait_disk_window_read_request_size_bytes", device="md0") == pytest.approx(262144.0)
        assert exposed(samples, "gpuwait_disk_window_reads_per_second", device="md0") > 0.0
        assert exposed(samples, "gpuwait_disk_window_queue_depth_max", device="md0") > 0.0
        assert exposed(samples, "gpuwait_disk_window_read_bytes_per_second", device="md0") > 0.0
        assert value(samples, "gpuwait_disk_window_write_await_seconds", device="md0") is None
        assert exposed(samples, "gpuwait_source_errors_total", source="diskstats") == 0.0
        assert promtool_problems(exp.scrape_text()) == ""


@pytest.mark.integration
def test_exporter_device_exclude_option(tmp_path):
    proc = copy_procfs(tmp_path)
    with ExporterProcess([*exporter_args(proc), r"--collector.diskstats.device-exclude=^(loop\d+|md\d+|nvme0n1.*)$"]) as exp:
        samples = exp.wait_for(lambda s: s if "gpuwait_disk_reads_completed_total" in s else None)
        assert {lbl["device"] for lbl, _ in samples["gpuwait_disk_reads_completed_total"]} == {"nvme1n1", "nvme2n1", "nvme3n1"}

# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("diskstats"), st.booleans())
def test_diskstats(text, filtered):
    only_parse_errors(parse_diskstats, text, (lambda name: not name.startswith("loop")) if filtered else None)
