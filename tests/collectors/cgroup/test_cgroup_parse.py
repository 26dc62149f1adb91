"""Parsers of the cgroup CPU, IO and pressure files, on captured and documented texts."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given

from conftest import CGROUP_V1_TREE, HOST_TREE, text_fixture
from fuzz import examples, only_parse_errors, texts
from gpuwait.collectors.cgroup.parse import (
    blkio_io,
    parse_blkio_rwstat,
    parse_cfs_quota,
    parse_cgroup_pressure,
    parse_cpu_max,
    parse_cpu_stat_v1,
    parse_cpu_stat_v2,
    parse_cpuacct_stat,
    parse_cpuacct_usage,
    parse_io_stat,
)
from gpuwait.collectors.cgroup.payload import CgroupIo
from gpuwait.core.errors import ParseError

V1 = CGROUP_V1_TREE / "sys" / "fs" / "cgroup"
V2 = HOST_TREE / "sys" / "fs" / "cgroup"
POD_V1 = "kubepods/burstable/podd48336c5-45ad-4e78-b1a0-005736bbcfd9"
CTR_V1 = POD_V1 + "/d3ba3468136628bcec364146de2049d4d6395f7f0b948a824a6a254fa425f1db"
POD_V2 = "kubepods.slice/kubepods-pod4312ade9_202f_48f0_beb7_fe4764012968.slice"


def read(path) -> str:
    return path.read_text()


def text(name: str) -> str:
    return text_fixture("cgroupfs", name)


# -- cpu.stat ---------------------------------------------------------------------------------


def test_v2_cpu_stat_of_a_cgroup_without_the_cpu_controller_has_usage_only():
    # Captured: this machine's cgroup2 hierarchy has no cpu controller.
    stat = parse_cpu_stat_v2(read(V2 / "cpu.stat"))
    assert stat.usage_seconds == pytest.approx(747.932968)
    assert stat.user_seconds == pytest.approx(654.1226) and stat.system_seconds == pytest.approx(93.810367)
    assert (stat.periods, stat.throttled_periods, stat.throttled_seconds) == (None, None, None)


def test_v2_cpu_stat_with_bandwidth_counters_in_microseconds():
    stat = parse_cpu_stat_v2(read(V2 / POD_V2 / "cri-containerd-5599b9703f1a53fd260fdd2966bce88dcf9e74e63894eec94a1379e18e17765a.scope" / "cpu.stat"))
    assert (stat.periods, stat.throttled_periods) == (54, 50)
    assert stat.throttled_seconds == pytest.approx(3.454268)
    older = parse_cpu_stat_v2(text("cpu.stat-v2-six-keys.txt"))
    assert (older.periods, older.throttled_periods, older.throttled_seconds) == (2201, 812, pytest.approx(73.41221))


def test_v1_cpu_stat_counts_throttled_time_in_nanoseconds():
    stat = parse_cpu_stat_v1(read(V1 / "cpu" / CTR_V1 / "cpu.stat"))  # captured under load
    assert (stat.periods, stat.throttled_periods) == (54, 50)
    assert stat.throttled_seconds == pytest.approx(3.454268271)
    assert stat.usage_seconds is None
    assert parse_cpu_stat_v1(text("cpu.stat-v1-three-keys.txt")).throttled_seconds == pytest.approx(1.921546352)


@pytest.mark.parametrize("text", [
    "", "user_usec 1\n", "usage_usec 1\nusage_usec 2\n", "usage_usec -1\n", "usage_usec 1 2\n",
    "usage_usec 1\nnr_periods 3\n",  # bandwidth counters come as a set
    "usage_usec 1\nnr_periods 3\nnr_throttled x\nthrottled_usec 0\n",
])
def test_v2_cpu_stat_rejects(text):
    with pytest.raises(ParseError):
        parse_cpu_stat_v2(text)


def test_unknown_cpu_stat_keys_are_ignored_whatever_their_value():
    stat = parse_cpu_stat_v2("usage_usec 10\ncore_sched.force_idle_usec 7\nfuture_key 1.5\n")
    assert stat.usage_seconds == pytest.approx(1e-5)


# -- quotas -----------------------------------------------------------------------------------


def test_cpu_max():
    assert parse_cpu_max(read(V2 / POD_V2 / "cpu.max")) == pytest.approx(0.4)
    assert parse_cpu_max("max 100000\n") is None
    assert parse_cpu_max("600000 100000\n") == pytest.approx(6.0)
    for bad in ("", "max", "20000 0", "20000 -1", "x 100000", "1 2 3"):
        with pytest.raises(ParseError):
            parse_cpu_max(bad)


def test_cfs_quota():
    pod = V1 / "cpu" / POD_V1
    assert parse_cfs_quota(read(pod / "cpu.cfs_quota_us"), read(pod / "cpu.cfs_period_us")) == pytest.approx(0.4)
    assert parse_cfs_quota(read(V1 / "cpu" / "cpu.cfs_quota_us"), read(V1 / "cpu" / "cpu.cfs_period_us")) is None  # -1
    for quota, period in (("x", "100000"), ("20000", "0"), ("20000", ""), ("-x", "100000")):
        with pytest.raises(ParseError):
            parse_cfs_quota(quota, period)


def test_cpuacct():
    assert parse_cpuacct_usage(read(V1 / "cpuacct" / POD_V1 / "cpuacct.usage")) == pytest.approx(1.000613526)
    assert parse_cpuacct_stat(read(V1 / "cpuacct" / POD_V1 / "cpuacct.stat"), 100) == (pytest.approx(0.89), pytest.approx(0.10))
    with pytest.raises(ParseError):
        parse_cpuacct_stat("user 1\n", 100)


# -- io ---------------------------------------------------------------------------------------


def test_io_stat_documented_example():
    devices, malformed = parse_io_stat(text("io.stat-doc-example.txt"))
    assert malformed == ()
    assert devices["8:0"] == CgroupIo(90430464, 299008000, 8950, 1252, 50331648, 3021)
    assert devices["8:16"].read_bytes == 1459200


def test_io_stat_ignores_the_keys_of_io_cost_and_io_latency():
    devices, malformed = parse_io_stat(text("io.stat-cost-and-latency.txt"))
    assert malformed == ()
    assert devices["259:0"] == CgroupIo(6086656, 102400000, 412, 2005, 0, 0)
    assert devices["8:0"].reads == 16


def test_io_stat_before_discards_and_empty():
    devices, _ = parse_io_stat(text("io.stat-without-discards.txt"))
    assert (devices["8:0"].discard_bytes, devices["8:0"].discards) == (None, None)
    assert parse_io_stat("") == ({}, ())  # no IO yet


def test_a_bad_io_stat_line_costs_its_device_only():
    devices, malformed = parse_io_stat("8:0 rbytes=1 wbytes=2 rios=3\n8:16 rbytes=1 wbytes=2 rios=3 wios=4\nnope x=1\n")
    assert set(devices) == {"8:16"}
    assert set(malformed) == {"8:0", "line 3"}
    with pytest.raises(ParseError):
        parse_io_stat("8:0 rbytes=x wbytes=2 rios=3 wios=4\n")


def test_blkio_recursive_counts_what_the_plain_file_leaves_out():
    pod = V1 / "blkio" / POD_V1
    plain = blkio_io(parse_blkio_rwstat(read(pod / "blkio.throttle.io_service_bytes"))[0],
                     parse_blkio_rwstat(read(pod / "blkio.throttle.io_serviced"))[0])
    recursive = blkio_io(parse_blkio_rwstat(read(pod / "blkio.throttle.io_service_bytes_recursive"))[0],
                         parse_blkio_rwstat(read(pod / "blkio.throttle.io_serviced_recursive"))[0])
    assert plain == {"254:0": CgroupIo(0, 0, 0, 0, 0, 0)}
    assert recursive == {"254:0": CgroupIo(16781312, 4194304, 257, 64, 0, 0)}


def test_blkio_before_the_discard_line():
    io = blkio_io(parse_blkio_rwstat(text("blkio.throttle.io_service_bytes-without-discards.txt"))[0],
                  parse_blkio_rwstat(text("blkio.throttle.io_serviced-without-discards.txt"))[0])
    assert io["8:0"] == CgroupIo(90430464, 299008000, 8950, 1252, None, None)
    assert io["8:16"].reads == 192


def test_blkio_root_of_an_unthrottled_host_is_empty_not_an_error():
    assert parse_blkio_rwstat("Total 0\n") == ({}, ())


def test_blkio_bad_lines():
    devices, malformed = parse_blkio_rwstat("8:0 Read 1\n8:0 Write 2\n8:16 Read 1\n8:16 Bogus 2\n8:16 Write 3\n")
    assert set(devices) == {"8:0"} and malformed == ("8:16",)
    for nothing_parsed in ("8:0 Read 1\n", "8:0 Read x\n8:0 Write 1\n", "Read 1 2 3\n"):  # no Write line; junk
        with pytest.raises(ParseError):
            parse_blkio_rwstat(nothing_parsed)


def test_a_device_in_one_blkio_file_only_waits_for_the_next_read():
    assert blkio_io({"8:0": {"Read": 1, "Write": 2}}, {}) == {}


# -- pressure ---------------------------------------------------------------------------------


def test_cgroup_pressure_keeps_cpu_full():
    stalled = parse_cgroup_pressure(read(V1 / "unified" / POD_V1 / "cpu.pressure"), "cpu")
    assert stalled == {("cpu", "some"): pytest.approx(2.685992), ("cpu", "full"): pytest.approx(2.670901)}
    with pytest.raises(ParseError):
        parse_cgroup_pressure("", "io")


# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("cgroupfs"))
def test_fuzz_cgroup_files_of_an_owner(text):
    for parse in (parse_cpu_stat_v2, parse_cpu_stat_v1, parse_cpu_max, parse_cpuacct_usage):
        only_parse_errors(parse, text)
    only_parse_errors(parse_cpuacct_stat, text, 100)
    only_parse_errors(parse_cgroup_pressure, text, "io")
    only_parse_errors(parse_cfs_quota, text, "100000")
    only_parse_errors(parse_cfs_quota, "20000", text)
    for parse in (parse_io_stat, parse_blkio_rwstat):
        try:
            devices, _ = parse(text)
        except ParseError:
            continue
        for counters in devices.values():
            values = counters.values() if isinstance(counters, dict) else dataclasses.astuple(counters)
            assert all(v is None or 0 <= v < 2**64 for v in values)
