"""The pressure collector: PSI parser, source, window statistics and the exporter serving them."""

from __future__ import annotations

import errno
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import TEXT_FIXTURES, text_fixture
from fuzz import examples, only_parse_errors, texts
from gpuwait.core import pseudofile
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.collectors.pressure.parse import PressureLine, parse_pressure
from gpuwait.core.ring import ColumnRing, WindowView
from gpuwait.core.source import HostPaths
from gpuwait.collectors.pressure.payload import PressureData
from gpuwait.collectors.pressure.source import PressureSource
from gpuwait.collectors.pressure import window as pressure_stats
from host_collectors import copy_procfs, exporter_args, exposed, promtool_problems, rewrite
from support import ExporterProcess, value

# -- parser ------------------------------------------------------------------------------------

EXPECTED = {
    "cpu-4.20.txt": {"some": PressureLine(2.31, 1.06, 0.44, 871.233415)},
    "cpu-5.13.txt": {
        "some": PressureLine(14.87, 9.32, 4.05, 3207.415529),
        "full": PressureLine(3.12, 1.94, 0.88, 612.044871),
    },
    "cpu-6.1.txt": {
        "some": PressureLine(0.52, 0.31, 0.18, 48.810462),
        "full": PressureLine(0.0, 0.0, 0.0, 0.0),
    },
    "io-5.15.txt": {
        "some": PressureLine(31.07, 22.45, 11.8, 9512.307744),
        "full": PressureLine(27.63, 19.9, 10.21, 8123.00731),
    },
    "memory-5.15.txt": {
        "some": PressureLine(4.61, 1.2, 0.27, 19.341207),
        "full": PressureLine(2.08, 0.55, 0.12, 8.210554),
    },
    "memory-idle.txt": {
        "some": PressureLine(0.0, 0.0, 0.0, 0.0),
        "full": PressureLine(0.0, 0.0, 0.0, 0.0),
    },
    "irq-6.1.txt": {"full": PressureLine(0.0, 0.01, 0.0, 10.523394)},
}


def test_every_fixture_has_expectations():
    assert sorted(p.name for p in (TEXT_FIXTURES / "pressure").iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_fixture(name):
    assert parse_pressure(text_fixture("pressure", name)) == EXPECTED[name]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00\n",  # no total
        "some avg10=0.00 avg60=0.00 total=12\n",  # no avg300
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=12\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=13\n",
        "partial avg10=0.00 avg60=0.00 avg300=0.00 total=12\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=-12\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=1_000\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=99999999999999999999999\n",
        "some avg10=nan avg60=0.00 avg300=0.00 total=12\n",
        "some avg10=1e2 avg60=0.00 avg300=0.00 total=12\n",
        "some avg10=100.01 avg60=0.00 avg300=0.00 total=12\n",
        "some avg10=0.00 avg10=0.00 avg60=0.00 avg300=0.00 total=12\n",
        "some avg10 avg60=0.00 avg300=0.00 total=12\n",
        "some =0.00 avg60=0.00 avg300=0.00 total=12\n",
    ],
)
def test_parse_rejects(text):
    with pytest.raises(ParseError):
        parse_pressure(text)


def test_parse_tolerates_fields_a_later_kernel_adds():
    lines = parse_pressure("some avg10=1.00 avg60=2.00 avg300=3.00 total=5000000 avg1=0.50\n")
    assert lines == {"some": PressureLine(1.0, 2.0, 3.0, 5.0)}


_VALID = "some avg10=2.31 avg60=1.06 avg300=0.44 total=871233415\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def _check_parse(text: str) -> None:
    try:
        lines = parse_pressure(text)
    except ParseError:
        return
    assert lines and set(lines) <= {"some", "full"}
    for line in lines.values():
        assert 0.0 <= line.total_seconds < 2**64 / 1e6
        for avg in (line.avg10, line.avg60, line.avg300):
            assert 0.0 <= avg <= 100.0


@given(st.text())
def test_fuzz_any_text(text):
    _check_parse(text)


_TOKEN = st.one_of(
    st.sampled_from(["some", "full", "avg10=", "avg60=", "avg300=", "total=", "=", " ", "\n", "\t", ".", "-"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=4),
)


@given(st.data())
def test_fuzz_near_valid(data):
    """A valid file with a few of its characters replaced by, or spliced with, likely tokens."""
    text = _VALID
    for _ in range(data.draw(st.integers(1, 4))):
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 12)))
        text = text[:start] + data.draw(_TOKEN) + text[end:]
    _check_parse(text)


@given(st.lists(st.tuples(st.sampled_from(["some", "full"]), st.lists(
    st.tuples(st.sampled_from(["avg10", "avg60", "avg300", "total", "avg1"]), st.one_of(
        st.integers(min_value=0, max_value=2**66).map(str),
        st.decimals(min_value=0, max_value=200, places=2).map(str),
        st.text(alphabet="0123456789.-e+_", max_size=8),
    )), max_size=6)), max_size=3))
def test_fuzz_structured(lines):
    _check_parse("".join(f"{scope} " + " ".join(f"{k}={v}" for k, v in fields) + "\n" for scope, fields in lines))


# -- source ------------------------------------------------------------------------------------


def _tree(tmp_path, **files: str | None):
    """A procfs with /proc/pressure holding the given resources (None: leave it out)."""
    pressure = tmp_path / "proc" / "pressure"
    pressure.mkdir(parents=True)
    for resource, text in files.items():
        if text is not None:
            (pressure / resource).write_text(text)
    return PressureSource(HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys")))


def test_source_reads_all_resources_and_drops_cpu_full(tmp_path):
    source = _tree(
        tmp_path,
        cpu=text_fixture("pressure", "cpu-5.13.txt"),
        io=text_fixture("pressure", "io-5.15.txt"),
        memory=text_fixture("pressure", "memory-5.15.txt"),
    )
    reading = source.read()
    assert reading.source == "pressure" and reading.errors == ()
    assert reading.data == PressureData({
        ("cpu", "some"): 3207.415529,
        ("io", "some"): 9512.307744,
        ("io", "full"): 8123.00731,
        ("memory", "some"): 19.341207,
        ("memory", "full"): 8.210554,
    })


def test_source_kernel_without_cpu_full(tmp_path):
    source = _tree(tmp_path, cpu=text_fixture("pressure", "cpu-4.20.txt"), io=_VALID, memory=_VALID)
    assert source.read().data.stalled_seconds[("cpu", "some")] == 871.233415


def test_source_missing_resource_drops_only_it(tmp_path):
    source = _tree(tmp_path, cpu=_VALID, io=None, memory=_VALID)
    reading = source.read()
    assert reading.errors == (f"missing:{tmp_path}/proc/pressure/io",)
    assert sorted(reading.data.stalled_seconds) == [("cpu", "some"), ("memory", "full"), ("memory", "some")]


def test_source_unreadable_resource_drops_only_it(tmp_path):
    # psi=0 leaves the files in place and fails their reads (EOPNOTSUPP); a directory in
    # the file's place fails the read the same way, with an OSError.
    source = _tree(tmp_path, cpu=_VALID, io=_VALID)
    (tmp_path / "proc" / "pressure" / "memory").mkdir()
    reading = source.read()
    assert reading.errors == (f"unreadable:{tmp_path}/proc/pressure/memory",)
    assert {r for r, _ in reading.data.stalled_seconds} == {"cpu", "io"}


def test_source_counts_a_missing_full_line_of_io_or_memory(tmp_path):
    some_only = "some avg10=1.00 avg60=2.00 avg300=3.00 total=5000000\n"
    source = _tree(tmp_path, cpu=some_only, io=some_only, memory=_VALID)
    reading = source.read()
    # cpu has no full line before 5.13, so only io's absence is a damaged file.
    assert reading.errors == (f"parse:{tmp_path}/proc/pressure/io:full",)
    assert reading.data.stalled_seconds[("io", "some")] == 5.0 and ("io", "full") not in reading.data.stalled_seconds
    assert ("memory", "full") in reading.data.stalled_seconds


def test_source_garbage_resource_drops_only_it(tmp_path):
    source = _tree(tmp_path, cpu="\x00\x01garbage\n", io=_VALID, memory=_VALID)
    reading = source.read()
    assert reading.errors == (f"parse:{tmp_path}/proc/pressure/cpu",)
    assert {r for r, _ in reading.data.stalled_seconds} == {"io", "memory"}


def test_source_without_psi_raises(tmp_path):
    # A kernel built without CONFIG_PSI has no /proc/pressure: no data, not a failure.
    (tmp_path / "proc").mkdir()
    source = PressureSource(HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys")))
    with pytest.raises(NoData) as e:
        source.read()
    assert e.value.cause == f"unavailable:{tmp_path}/proc/pressure"
    assert "missing:" in e.value.detail


def test_source_with_psi_disabled_at_boot_is_no_data(tmp_path, monkeypatch):
    # psi=0 keeps the files, and the kernel fails every read of them with EOPNOTSUPP; a
    # regular file cannot fail that way, so the error is staged at the read.
    source = _tree(tmp_path, cpu=_VALID, io=_VALID, memory=_VALID)
    real_read = pseudofile.read

    def disabled(path, limit=None):
        if "/pressure/" in path:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported", path)
        return real_read(path, limit)

    monkeypatch.setattr(pseudofile, "read", disabled)
    with pytest.raises(NoData) as e:
        source.read()
    assert e.value.cause == f"unavailable:{tmp_path}/proc/pressure"


def test_source_whose_resources_all_fail_otherwise_is_a_source_error(tmp_path):
    # Files that are there but cannot be read (here: directories in their place) are a failure.
    source = _tree(tmp_path)
    for resource in ("cpu", "io", "memory"):
        (tmp_path / "proc" / "pressure" / resource).mkdir()
    with pytest.raises(SourceError) as e:
        source.read()
    assert e.value.cause == f"unavailable:{tmp_path}/proc/pressure"
    assert "unreadable:" in e.value.detail


# -- window statistics -----------------------------------------------------------------------


def _view(times, **columns) -> WindowView:
    """Columns named resource_scope, fed through the collector's own columns() and the ring."""
    ring = ColumnRing(len(times) + 1)
    for i, t in enumerate(times):
        stalled = {tuple(k.split("_")): v[i] for k, v in columns.items() if not math.isnan(v[i])}
        ring.append(t, pressure_stats.columns(PressureData(stalled)))
    return ring.view()


def test_window_ratio_and_max():
    # cpu some stalls 20 ms of every 100 ms, except one interval fully stalled.
    times = [0.0, 0.1, 0.2, 0.3, 0.4]
    view = _view(times, cpu_some=[5.0, 5.02, 5.04, 5.14, 5.16], io_full=[1.0] * 5)
    stats = pressure_stats.summarize(view, None)
    assert stats.stalled_ratio[("cpu", "some")] == pytest.approx(0.16 / 0.4)
    assert stats.stalled_max_ratio[("cpu", "some")] == pytest.approx(1.0)
    assert stats.stalled_ratio[("io", "full")] == 0.0
    assert stats.stalled_max_ratio[("io", "full")] == 0.0


def test_window_ratio_clamped_to_one():
    # The kernel's interval can be a little longer than the one the sampler measured.
    view = _view([0.0, 0.1, 0.2], memory_some=[0.0, 0.1004, 0.2008])
    stats = pressure_stats.summarize(view, None)
    assert stats.stalled_ratio[("memory", "some")] == 1.0
    assert stats.stalled_max_ratio[("memory", "some")] == 1.0


def test_window_counter_reset_gives_no_negative_ratio():
    # A reset (the counter starts over) is skipped: the ratio is that of the other intervals.
    view = _view([0.0, 0.1, 0.2, 0.3], io_some=[100.0, 100.05, 0.0, 0.05])
    stats = pressure_stats.summarize(view, None)
    assert stats.stalled_ratio[("io", "some")] == pytest.approx(0.5)
    assert stats.stalled_max_ratio[("io", "some")] == pytest.approx(0.5)


def test_window_resource_vanishing_mid_window():
    nan = math.nan
    view = _view(
        [0.0, 0.1, 0.2, 0.3, 0.4],
        cpu_some=[1.0, 1.01, 1.02, 1.03, 1.04],
        memory_full=[2.0, 2.03, 2.06, nan, nan],
    )
    stats = pressure_stats.summarize(view, None)
    assert stats.stalled_ratio[("memory", "full")] == pytest.approx(0.3)
    assert stats.stalled_ratio[("cpu", "some")] == pytest.approx(0.1)


def test_window_with_one_sample_has_no_statistics():
    stats = pressure_stats.summarize(_view([0.0], cpu_some=[1.0]), None)
    assert stats.stalled_ratio == {} and stats.stalled_max_ratio == {}


# -- the exporter process --------------------------------------------------------------------


@pytest.mark.integration
def test_exporter_serves_pressure(tmp_path):
    proc = copy_procfs(tmp_path)
    with ExporterProcess(exporter_args(proc)) as exp:
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_pressure_window_stalled_ratio", resource="io", scope="some") is not None else None)
        total = "gpuwait_pressure_stalled_seconds_total"
        assert exposed(samples, total, resource="cpu", scope="some") == 91843.120554
        assert value(samples, total, resource="cpu", scope="full") is None
        assert exposed(samples, total, resource="io", scope="some") == 28419.033871
        assert exposed(samples, total, resource="io", scope="full") == 21007.711209
        assert exposed(samples, total, resource="memory", scope="some") == 1.502213
        assert exposed(samples, total, resource="memory", scope="full") == 0.98831
        # Nothing moves in the fixture: the whole window is free of stalls.
        assert exposed(samples, "gpuwait_pressure_window_stalled_ratio", resource="io", scope="some") == 0.0
        assert exposed(samples, "gpuwait_pressure_window_stalled_max_ratio", resource="cpu", scope="some") == 0.0

        # Ten seconds of cpu stall between two samples 50 ms apart: that interval is fully stalled.
        rewrite(proc / "pressure" / "cpu",
                "some avg10=18.42 avg60=16.97 avg300=15.03 total=91853120554\n"
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_pressure_window_stalled_max_ratio", resource="cpu", scope="some") == 1.0 else None)
        assert exposed(samples, total, resource="cpu", scope="some") == 91853.120554
        assert 0.0 < exposed(samples, "gpuwait_pressure_window_stalled_ratio", resource="cpu", scope="some") <= 1.0
        assert exposed(samples, "gpuwait_pressure_window_stalled_max_ratio", resource="io", scope="full") == 0.0
        assert exposed(samples, "gpuwait_source_up", source="pressure") == 1.0
        assert exposed(samples, "gpuwait_source_errors_total", source="pressure") == 0.0
        assert promtool_problems(exp.scrape_text()) == ""


@pytest.mark.integration
def test_exporter_counts_a_missing_resource(tmp_path):
    proc = copy_procfs(tmp_path)
    (proc / "pressure" / "memory").unlink()
    with ExporterProcess(exporter_args(proc)) as exp:
        samples = exp.wait_for(lambda s: s if (value(s, "gpuwait_source_errors_total", source="pressure") or 0) >= 2 else None)
        assert exposed(samples, "gpuwait_source_up", source="pressure") == 1.0
        assert value(samples, "gpuwait_pressure_stalled_seconds_total", resource="memory", scope="some") is None
        assert exposed(samples, "gpuwait_pressure_stalled_seconds_total", resource="io", scope="full") == 21007.711209
        assert "missing:" in exp.log() and "pressure/memory" in exp.log()

# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("pressure"))
def test_pressure(text):
    only_parse_errors(parse_pressure, text)
