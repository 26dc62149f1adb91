"""The rdma collector: parsers, window statistics, both sources on changing trees, and the
real exporter on the fixture host (A9, A10, A11)."""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import HOST_TREE
from fixture_host import host_args
from fuzz import examples, only_parse_errors, texts
from gpuwait.collectors.rdma import parse as rdma_parse
from gpuwait.core.plugin import Snapshot
from gpuwait.core.errors import NoData, ParseError
from gpuwait.exposition.family import FamilyBuilder
from gpuwait.collectors.rdma.metrics import expose
from gpuwait.collectors.rdma.parse import (
    LinkRate,
    NumberedState,
    is_active,
    parse_counter,
    parse_name,
    parse_netdev_name,
    parse_numbered_state,
    parse_rate,
)
from gpuwait.core.reading import Reading
from gpuwait.core.ring import WindowView
from gpuwait.core.source import HostPaths
from gpuwait.collectors.rdma.payload import (
    PortTraffic,
    RdmaData,
    RdmaDeviceData,
    RdmaPortData,
    RdmaTrafficData,
)
from gpuwait.collectors.rdma.source import RdmaSource, RdmaTrafficSource
from gpuwait.collectors.rdma import window as rdma_stats
from gpuwait.collectors.rdma.window import LEGACY_COUNTER_MAX, counter_rates
from gpuwait.trace.codec import from_jsonable, to_jsonable
from support import ExporterProcess, value

IB = ("mlx5_0", 1, "InfiniBand")
ROCE = ("mlx5_1", 1, "Ethernet")
IB_PORT = "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0/infiniband/mlx5_0/ports/1"
ROCE_DEVICE = "devices/pci0000:a7/0000:a7:01.0/0000:a8:00.0"
ROCE_PORT = ROCE_DEVICE + "/infiniband/mlx5_1/ports/1"
U32 = 1 << 32


# -- parsers --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("4: ACTIVE\n", NumberedState(4, "ACTIVE")),
    ("1: DOWN\n", NumberedState(1, "DOWN")),
    ("2: INIT\n", NumberedState(2, "INIT")),
    ("3: ARMED\n", NumberedState(3, "ARMED")),
    ("5: ACTIVE_DEFER\n", NumberedState(5, "ACTIVE_DEFER")),
    ("5: LinkUp\n", NumberedState(5, "LinkUp")),
    ("2: Polling\n", NumberedState(2, "Polling")),
    ("3: Disabled\n", NumberedState(3, "Disabled")),
    ("4: PortConfigurationTraining\n", NumberedState(4, "PortConfigurationTraining")),
    ("6: LinkErrorRecovery\n", NumberedState(6, "LinkErrorRecovery")),
    ("7: Phy Test\n", NumberedState(7, "Phy Test")),
    ("0: <unknown>\n", NumberedState(0, "<unknown>")),
])
def test_parse_numbered_state(text, expected):
    assert parse_numbered_state(text) == expected


def test_active_means_active_or_active_defer():
    assert [is_active(n) for n in range(7)] == [False, False, False, False, True, True, False]


@pytest.mark.parametrize("bad", ["", "ACTIVE", "4", "x: ACTIVE", "4:", "-1: DOWN", "4: ACTIVE\n5: LinkUp"])
def test_parse_numbered_state_rejects(bad):
    with pytest.raises(ParseError):
        parse_numbered_state(bad)


@pytest.mark.parametrize("text, gbit, width, speed", [
    ("400 Gb/sec (4X NDR)\n", 400, 4, "NDR"),
    ("200 Gb/sec (4X HDR)\n", 200, 4, "HDR"),
    ("100 Gb/sec (2X HDR)\n", 100, 2, "HDR"),    # 100GbE on two 50G lanes (RoCE)
    ("100 Gb/sec (4X EDR)\n", 100, 4, "EDR"),
    ("25 Gb/sec (1X EDR)\n", 25, 1, "EDR"),
    ("56 Gb/sec (4X FDR)\n", 56, 4, "FDR"),
    ("40 Gb/sec (4X FDR10)\n", 40, 4, "FDR10"),
    ("40 Gb/sec (4X QDR)\n", 40, 4, "QDR"),
    ("2.5 Gb/sec (1X SDR)\n", 2.5, 1, "SDR"),
    ("10 Gb/sec (4X)\n", 10, 4, ""),             # kernels that printed no name for SDR
    ("20 Gb/sec (4X DDR)\n", 20, 4, "DDR"),
    ("300 Gb/sec (12X EDR)\n", 300, 12, "EDR"),
    ("800 Gb/sec (4X XDR)\n", 800, 4, "XDR"),
])
def test_parse_rate(text, gbit, width, speed):
    rate = parse_rate(text)
    assert rate == LinkRate(gbit, width, speed)
    assert rate.bytes_per_second == gbit * 1e9 / 8


@pytest.mark.parametrize("bad", ["", "400 Gb/sec", "400 Gb/sec (NDR)", "400 Gb/sec (0X NDR)", "400.7 Gb/sec (4X NDR)",
                                 "fast Gb/sec (4X NDR)", "400 Gb/sec (4X N-R)", "400 Mb/sec (4X NDR)",
                                 "400 Gb/sec (4X NDR)\n200 Gb/sec (4X HDR)"])
def test_parse_rate_rejects(bad):
    with pytest.raises(ParseError):
        parse_rate(bad)


SPEEDS_DECI = {"SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140, "EDR": 250, "HDR": 500, "NDR": 1000, "XDR": 2000}


@given(st.sampled_from(sorted(SPEEDS_DECI)), st.sampled_from([1, 2, 4, 8, 12]))
def test_parse_rate_reads_back_what_the_kernel_prints(speed, width):
    deci = SPEEDS_DECI[speed] * width  # rate_show(): "%d%s Gb/sec (%dX%s)"
    text = "%d%s Gb/sec (%dX %s)\n" % (deci // 10, ".5" if deci % 10 else "", width, speed)
    assert parse_rate(text) == LinkRate(deci / 10, width, speed)


@pytest.mark.parametrize("text, expected", [
    ("0\n", 0), ("48211975\n", 48211975), ("18446744073709551615\n", (1 << 64) - 1),
    ("N/A (no PMA)\n", None),
])
def test_parse_counter(text, expected):
    assert parse_counter(text) == expected


@pytest.mark.parametrize("bad", ["", "-1", "12 34", "0x10", "18446744073709551616", "1e6", "N"])
def test_parse_counter_rejects(bad):
    with pytest.raises(ParseError):
        parse_counter(bad)


def test_parse_names():
    assert parse_name("InfiniBand\n", "link_layer") == "InfiniBand"
    assert parse_name("28.39.1002\n", "fw_ver") == "28.39.1002"
    assert parse_netdev_name("ens1f0np0\n") == "ens1f0np0"
    for bad in ("", "a/b", "eth0:1", "sixteen_chars_xx", "two words", ".."):
        with pytest.raises(ParseError):
            parse_netdev_name(bad)


def parse_everything(text: str) -> None:
    for parse in (parse_numbered_state, parse_rate, parse_counter, parse_netdev_name, lambda t: parse_name(t, "x")):
        try:
            parse(text)
        except ParseError:
            pass


@given(st.text(max_size=60))
def test_parsers_raise_only_parse_error(text):
    parse_everything(text)


@given(st.binary(max_size=40))
def test_parsers_survive_any_bytes(raw):
    parse_everything(raw.decode("utf-8", errors="replace"))


@given(st.from_regex(r"\A[0-9]{1,4}(\.[0-9])? Gb/sec \([0-9]{1,2}X( [A-Z0-9]{0,6})?\)\n?\Z"))
def test_rate_lookalikes_raise_only_parse_error(text):
    parse_everything(text)


# -- window statistics ----------------------------------------------------------------------

def view_of(times, **columns_by_kind) -> WindowView:
    """columns_by_kind: tx=[...], rx=[...] for the InfiniBand port."""
    return WindowView(list(times), {(kind, *IB): [float(v) for v in vals] for kind, vals in columns_by_kind.items()})


def test_steady_traffic():
    times = [i * 0.1 for i in range(11)]
    tx = [10**12 + i * 5_000_000_000 for i in range(11)]  # 50 GB/s: NDR line rate
    rx = [10**12 + i * 1_000_000 for i in range(11)]
    stats = rdma_stats.summarize(view_of(times, tx=tx, rx=rx, txp=[i * 1000 for i in range(11)]), None).ports[IB]
    assert stats.transmit_bytes_mean == pytest.approx(5e10)
    assert stats.transmit_bytes_max == pytest.approx(5e10)
    assert stats.transmit_burstiness == pytest.approx(0.0, abs=1e-9)
    assert stats.receive_bytes_mean == pytest.approx(1e7)
    assert stats.transmit_packets_mean == pytest.approx(1e4)
    assert stats.receive_packets_mean is None


def test_bursts_show_in_max_and_burstiness_not_in_mean():
    times = [i * 0.1 for i in range(21)]
    tx, total = [], 0
    for i in range(21):
        tx.append(total)
        total += 4_000_000_000 if i % 5 == 4 else 0  # one 40 GB/s interval in five
    stats = rdma_stats.summarize(view_of(times, tx=tx), None).ports[IB]
    assert stats.transmit_bytes_mean == pytest.approx(8e9)
    assert stats.transmit_bytes_max == pytest.approx(4e10)
    assert stats.transmit_burstiness == pytest.approx(2.0)


def test_legacy_32_bit_packet_counter_wraps():
    times = [0.0, 0.1, 0.2, 0.3]
    values = [U32 - 3000, U32 - 1000, 1000, 3000]
    rates, mean_rate = counter_rates(times, values, 1)
    assert rates == pytest.approx([20000.0] * 3)
    assert mean_rate == pytest.approx(20000.0)


def test_legacy_32_bit_data_counter_wraps_in_bytes():
    # port_xmit_data counts 4-byte words: the wrap of the raw field is at 4 * 2**32 bytes
    times = [0.0, 0.1, 0.2]
    values = [4 * (U32 - 1000), 4 * 500, 4 * 2000]
    rates, mean_rate = counter_rates(times, values, 4)
    assert rates == pytest.approx([60000.0, 60000.0])
    assert mean_rate == pytest.approx(60000.0)


def test_saturated_counter_publishes_no_rate():
    stuck = float(LEGACY_COUNTER_MAX)
    times = [0.0, 0.1, 0.2, 0.3, 0.4]
    rates, mean_rate = counter_rates(times, [U32 - 9000, U32 - 5000, stuck, stuck, stuck], 1)
    # only the interval before it stuck counts; what went uncounted since is unknowable
    assert rates == pytest.approx([40000.0])
    assert mean_rate == pytest.approx(40000.0)
    assert counter_rates(times, [stuck] * 5, 1) == ([], None)
    stats = rdma_stats.summarize(view_of(times, tx=[4 * stuck] * 5), None).ports[IB]
    assert stats.transmit_bytes_mean is None and stats.transmit_bytes_max is None and stats.transmit_burstiness is None


def test_a_steady_counter_reaches_the_ceiling_only_between_its_ends():
    """The ring's account of a counter that never went back answers without its rows, but
    says what looking at them would say, wherever the 32-bit maximum lies."""
    stuck = float(LEGACY_COUNTER_MAX)
    key = ("txp", *IB)
    for column in ([stuck + 1, stuck + 5, stuck + 9],   # a 64-bit counter, past it from the start
                   [stuck - 9, stuck - 5, stuck - 1],   # below it throughout
                   [stuck - 9, stuck, stuck],           # stuck at it
                   [stuck - 9, stuck, stuck + 3],       # went through it
                   [stuck - 9, stuck - 2, stuck + 3],   # went past it
                   [stuck, stuck + 1, stuck + 2]):      # left it
        view = WindowView([0.0, 0.1, 0.2], {key: column}, {key: (column[0], column[-1])})
        assert rdma_stats._reached(view, key, stuck) == (stuck in column), column


def test_counter_cleared_after_saturation_resumes_without_a_made_up_interval():
    stuck = float(LEGACY_COUNTER_MAX)
    times = [0.0, 0.1, 0.2, 0.3, 0.4]
    rates, _ = counter_rates(times, [U32 - 9000, stuck, 0, 1000, 2000], 1)
    assert rates == pytest.approx([10000.0, 10000.0])


def test_64_bit_counter_reset_is_skipped_not_negative():
    times = [0.0, 0.1, 0.2, 0.3]
    values = [900 * U32, 900 * U32 + 10**9, 5000, 10**9 + 5000]
    rates, mean_rate = counter_rates(times, values, 4)
    assert rates == pytest.approx([1e10, 1e10])
    assert mean_rate == pytest.approx(1e10)


def test_gap_breaks_the_run_so_a_replug_is_not_read_as_a_wrap():
    nan = math.nan
    times = [0.0, 0.1, 0.2, 0.3, 0.4]
    values = [3_000_000_000, 3_000_100_000, nan, 100, 100_100]  # unplugged, re-plugged from 0
    rates, mean_rate = counter_rates(times, values, 1)
    assert rates == pytest.approx([1e6, 1e6])
    assert mean_rate == pytest.approx(1e6)


@given(st.lists(st.one_of(st.integers(0, (1 << 64) - 1), st.integers(U32 - 100, U32 + 100), st.just(LEGACY_COUNTER_MAX)),
                min_size=0, max_size=30),
       st.sampled_from([1, 4]))
def test_rates_are_never_negative_nor_unbounded(raw, unit):
    times = [i * 0.1 for i in range(len(raw))]
    values = [float(v * unit) for v in raw]
    rates, mean_rate = counter_rates(times, values, unit)
    largest_step = max((abs(b - a) for a, b in zip(values, values[1:])), default=0.0)
    bound = max(largest_step, 2.0 * U32 * unit) / 0.1 * 1.0001
    for r in rates + ([mean_rate] if mean_rate is not None else []):
        assert 0.0 <= r <= bound


def test_columns_leave_out_unavailable_counters():
    data = RdmaTrafficData((PortTraffic("mlx5_0", 1, "InfiniBand", 400, None, 7, None),))
    assert rdma_stats.columns(data) == {("tx", *IB): 400.0, ("txp", *IB): 7.0}


# -- sources on changing trees --------------------------------------------------------------

@pytest.fixture
def tree(tmp_path) -> pathlib.Path:
    shutil.copytree(HOST_TREE / "sys", tmp_path / "sys", symlinks=True)
    return tmp_path


def paths_of(tree: pathlib.Path) -> HostPaths:
    return HostPaths(str(tree / "proc"), str(tree / "sys"))


def traffic(reading) -> dict:
    return {(p.device, p.port, p.link_layer): p for p in reading.data.ports}


def devices(reading) -> dict:
    return {d.device: d for d in reading.data.devices}


def unplug(tree: pathlib.Path, device: str) -> None:
    link = tree / "sys/class/infiniband" / device
    real = link.resolve()
    link.unlink()
    shutil.rmtree(real.parent.parent)  # the PCI function goes with it


def replug(tree: pathlib.Path, device: str) -> None:
    original = HOST_TREE / "sys/class/infiniband" / device
    pci_function = original.resolve().parent.parent
    relative = pci_function.relative_to((HOST_TREE / "sys").resolve())
    shutil.copytree(pci_function, tree / "sys" / relative, symlinks=True)
    os.symlink(os.readlink(original), tree / "sys/class/infiniband" / device)


def test_traffic_source_reads_the_fixture_host():
    reading = RdmaTrafficSource(paths_of(HOST_TREE)).read()
    assert reading.errors == ()
    ports = traffic(reading)
    # The packet counters are the slow tier's: two firmware queries a port per sample, not four.
    assert ports[IB] == PortTraffic("mlx5_0", 1, "InfiniBand", 4 * 1379815342720, 4 * 1402853175312)
    assert ports[ROCE] == PortTraffic("mlx5_1", 1, "Ethernet", 4 * 58213764019, 4 * 61092847733)


def test_detail_source_reads_the_fixture_host():
    reading = RdmaSource(paths_of(HOST_TREE)).read()
    assert reading.errors == ()
    ib, roce = devices(reading)["mlx5_0"], devices(reading)["mlx5_1"]
    assert (ib.pci_address, ib.numa_node, ib.node_guid, ib.firmware_version, ib.hca_type, ib.board_id) == (
        "0000:19:00.0", 0, "a088:c203:0047:9e1c", "28.39.1002", "MT4129", "MT_0000000838")
    (port,) = ib.ports
    assert (port.port, port.link_layer, port.netdev, port.state, port.state_name, port.physical_state) == (
        1, "InfiniBand", "ibp25s0", 4, "ACTIVE", 5)
    assert (port.rate_bytes_per_second, port.link_width, port.link_speed) == (50e9, "4X", "NDR")
    assert port.counters["port_xmit_wait"] == 48211975 and port.counters["link_downed"] == 1
    assert "port_xmit_data" not in port.counters  # the fast tier reads it
    assert (port.counters["port_xmit_packets"], port.counters["port_rcv_packets"]) == (2937481820, 2985122213)
    assert "lifespan" not in port.hw_counters
    assert "np_cnp_sent" not in port.hw_counters  # congestion counters are RoCE's
    (rport,) = roce.ports
    assert (roce.pci_address, roce.numa_node, rport.link_layer, rport.netdev) == ("0000:a8:00.0", 1, "Ethernet", "ens1f0np0")
    assert rport.rate_bytes_per_second == 12.5e9
    assert (rport.counters["port_xmit_packets"], rport.counters["port_rcv_packets"]) == (190276544, 201553917)
    assert rport.hw_counters["np_cnp_sent"] == 16671 and rport.hw_counters["rp_cnp_handled"] == 15320


def test_payloads_survive_a_trace_round_trip():
    for source, cls in ((RdmaTrafficSource, RdmaTrafficData), (RdmaSource, RdmaData)):
        data = source(paths_of(HOST_TREE)).read().data
        assert from_jsonable(cls, to_jsonable(data)) == data


def test_no_pma_and_no_hw_counters(tree):
    """A driver without a performance-management agent prints N/A in every counter file;
    one without hw stats has no hw_counters directory. Counted once, not every sample."""
    counters = tree / "sys" / IB_PORT / "counters"
    for f in counters.iterdir():
        f.write_text("N/A (no PMA)\n")
    shutil.rmtree(tree / "sys" / IB_PORT / "hw_counters")
    fast, slow = RdmaTrafficSource(paths_of(tree)), RdmaSource(paths_of(tree))
    first = fast.read()
    assert traffic(first)[IB] == PortTraffic("mlx5_0", 1, "InfiniBand", None, None)
    assert traffic(first)[ROCE].transmit_bytes == 4 * 58213764019
    assert first.errors == (f"unavailable:{tree / 'sys/class/infiniband/mlx5_0/ports/1/counters'}",)
    assert fast.read().errors == ()
    detail = slow.read()
    (port,) = devices(detail)["mlx5_0"].ports
    assert port.counters == {} and port.hw_counters == {}
    assert port.state == 4  # the rest of the port is still read
    assert len(detail.errors) == 1 and detail.errors[0].startswith("unavailable:")
    assert slow.read().errors == ()


def test_port_without_counters_directory(tree):
    """Drivers without a PMA (iWARP, EFA) have no counters/ at all on current kernels."""
    shutil.rmtree(tree / "sys" / IB_PORT / "counters")
    fast = RdmaTrafficSource(paths_of(tree), relist_seconds=0.0)
    first = fast.read()
    assert set(traffic(first)) == {ROCE}
    assert first.errors == (f"unavailable:{tree / 'sys/class/infiniband/mlx5_0/ports/1/counters'}",)
    assert fast.read().errors == ()
    detail = RdmaSource(paths_of(tree)).read()
    (port,) = devices(detail)["mlx5_0"].ports
    assert port.counters == {} and port.hw_counters["out_of_sequence"] == 12
    assert detail.errors == ()


def test_unplug_mid_run_and_replug(tree):
    fast = RdmaTrafficSource(paths_of(tree), relist_seconds=0.0)
    slow = RdmaSource(paths_of(tree))
    assert set(traffic(fast.read())) == {IB, ROCE}
    unplug(tree, "mlx5_1")
    gone = fast.read()
    assert set(traffic(gone)) == {IB} and gone.errors == ()
    detail = slow.read()
    assert set(devices(detail)) == {"mlx5_0"} and detail.errors == ()
    replug(tree, "mlx5_1")
    assert set(traffic(fast.read())) == {IB, ROCE}
    assert set(devices(slow.read())) == {"mlx5_0", "mlx5_1"}


def test_vanished_port_is_dropped_at_once_and_an_added_one_waits_for_the_relist(tree):
    fast = RdmaTrafficSource(paths_of(tree), relist_seconds=3600.0)
    assert set(traffic(fast.read())) == {IB, ROCE}
    unplug(tree, "mlx5_1")
    assert set(traffic(fast.read())) == {IB}
    assert set(traffic(fast.read())) == {IB}  # re-listed right after the vanish
    replug(tree, "mlx5_1")
    assert set(traffic(fast.read())) == {IB}  # the list is kept between re-lists
    fast._next_relist = 0.0
    assert set(traffic(fast.read())) == {IB, ROCE}


def test_device_link_left_dangling_is_skipped(tree):
    real = (tree / "sys/class/infiniband/mlx5_1").resolve()
    shutil.rmtree(real)
    assert set(devices(RdmaSource(paths_of(tree)).read())) == {"mlx5_0"}
    reading = RdmaTrafficSource(paths_of(tree)).read()
    assert set(traffic(reading)) == {IB} and reading.errors == ()


def test_garbage_file_costs_only_its_series(tree):
    (tree / "sys" / IB_PORT / "counters/port_xmit_data").write_text("garbage\n")
    (tree / "sys" / IB_PORT / "state").write_text("ACTIVE\n")
    (tree / "sys" / IB_PORT / "hw_counters/out_of_sequence").write_text("-3\n")
    fast = RdmaTrafficSource(paths_of(tree)).read()
    port = traffic(fast)[IB]
    assert port.transmit_bytes is None and port.receive_bytes == 4 * 1402853175312
    assert fast.errors == (f"parse:{tree / 'sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data'}",)
    slow = RdmaSource(paths_of(tree)).read()
    (detail,) = devices(slow)["mlx5_0"].ports
    assert detail.state is None and detail.physical_state == 5
    assert "out_of_sequence" not in detail.hw_counters and detail.hw_counters["out_of_buffer"] == 0
    assert sorted(e.split(":", 1)[0] for e in slow.errors) == ["parse", "parse"]
    assert devices(slow)["mlx5_1"].ports[0].counters["port_xmit_wait"] == 0


def test_host_without_rdma_is_empty_not_failing(tmp_path):
    # No /sys/class/infiniband (ib_core not loaded), or an empty one: no data, not a failure.
    paths = HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys"))
    root = f"{tmp_path}/sys/class/infiniband"
    for source in (RdmaTrafficSource(paths), RdmaSource(paths)):
        with pytest.raises(NoData) as e:
            source.read()
        assert e.value.cause == f"unavailable:{root}"
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    for source in (RdmaTrafficSource(paths), RdmaSource(paths)):
        with pytest.raises(NoData):
            source.read()


def test_rdma_device_appearing_later_is_picked_up(tree):
    """ib_core loaded after the exporter started: the sources had no data, and read again on
    their schedule they find the device."""
    class_dir = tree / "sys/class/infiniband"
    hidden = tree / "sys/class/infiniband.later"
    class_dir.rename(hidden)
    fast = RdmaTrafficSource(paths_of(tree), relist_seconds=0.0)
    slow = RdmaSource(paths_of(tree))
    for source in (fast, slow):
        with pytest.raises(NoData):
            source.read()
    hidden.rename(class_dir)
    assert set(traffic(fast.read())) == {IB, ROCE}
    assert set(devices(slow.read())) == {"mlx5_0", "mlx5_1"}


def test_legacy_counters_and_netdev_without_gid(tree):
    """An HCA with only the 32-bit PortCounters: no unicast/multicast files, data stuck at the
    maximum; and a RoCE port whose GID table has no netdev falls back to the PCI function's."""
    counters = tree / "sys" / ROCE_PORT / "counters"
    for name in ("unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets"):
        (counters / name).unlink()
    (counters / "port_xmit_data").write_text(f"{LEGACY_COUNTER_MAX}\n")
    (counters / "port_rcv_packets").write_text(f"{LEGACY_COUNTER_MAX}\n")
    shutil.rmtree(tree / "sys" / ROCE_PORT / "gid_attrs")
    port = traffic(RdmaTrafficSource(paths_of(tree)).read())[ROCE]
    assert port.transmit_bytes == 4 * LEGACY_COUNTER_MAX
    (detail,) = devices(RdmaSource(paths_of(tree)).read())["mlx5_1"].ports
    assert "unicast_xmit_packets" not in detail.counters
    assert detail.counters["port_rcv_packets"] == LEGACY_COUNTER_MAX
    assert detail.netdev == "ens1f0np0"


# -- mapping to metrics ---------------------------------------------------------------------

def test_expose_maps_state_saturation_gauges_and_vanished_ports():
    stuck = LEGACY_COUNTER_MAX
    fast = RdmaTrafficData((PortTraffic("mlx4_0", 1, "InfiniBand", 4 * stuck, 4 * 100, stuck, None),))
    port = dict(netdev="", state_name="", physical_state_name="", rate_bytes_per_second=None, link_width="",
                link_speed="", counters={}, hw_counters={})
    vpi = RdmaDeviceData("mlx4_0", "0000:04:00.0", 0, "", "2.42.5000", "MT4099", "", (
        RdmaPortData(1, "InfiniBand", state=4, physical_state=5, **port),
        RdmaPortData(2, "Ethernet", state=1, physical_state=3, **dict(port, hw_counters={"active_qps": 7, "rx_bytes": 9})),
    ))
    window = rdma_stats.summarize(view_of([0.0, 0.1], rx=[0, 100]), None)  # mlx5_0: no longer present
    samples = list(expose({
        "rdma_traffic": Snapshot(Reading("rdma_traffic", 1.0, fast), window),
        "rdma": Snapshot(Reading("rdma", 1.0, RdmaData((vpi,))), None),
    }, None))
    FamilyBuilder().extend(samples)  # every sample fits the catalog
    got = {(s.name, s.labels): s.value for s in samples if s.value is not None}
    assert got[("gpuwait_rdma_port_traffic_counters_saturated", ("mlx4_0", "1", "InfiniBand"))] == 2
    assert got[("gpuwait_rdma_port_active", ("mlx4_0", "1", "InfiniBand"))] == 1
    assert got[("gpuwait_rdma_port_active", ("mlx4_0", "2", "Ethernet"))] == 0
    assert got[("gpuwait_rdma_port_state", ("mlx4_0", "2", "Ethernet"))] == 1
    assert got[("gpuwait_rdma_port_hw_resources", ("mlx4_0", "2", "Ethernet", "active_qps"))] == 7
    assert got[("gpuwait_rdma_port_hw_events_total", ("mlx4_0", "2", "Ethernet", "rx_bytes"))] == 9
    (info,) = [labels for name, labels in got if name == "gpuwait_rdma_device_info"]
    assert info[:4] == ("mlx4_0", "Ethernet,InfiniBand", "0000:04:00.0", "0")
    assert not [key for key in got if "window" in key[0]]


def test_expose_takes_the_packets_from_the_slow_tier_unless_the_traffic_reading_has_them():
    """Live, the fast tier reads the data counters and the slow tier the packet counters, whose
    window gives the packet means; a trace recorded when the fast tier read all four carries
    them in its traffic readings, which then win."""
    stuck = LEGACY_COUNTER_MAX
    port = dict(netdev="", state=4, state_name="ACTIVE", physical_state=5, physical_state_name="LinkUp",
                rate_bytes_per_second=None, link_width="", link_speed="", hw_counters={})
    slow = RdmaData((RdmaDeviceData("mlx5_0", "", 0, "", "", "", "", (
        RdmaPortData(1, "InfiniBand", counters={"port_xmit_packets": 700, "port_rcv_packets": stuck}, **port),)),))
    bytes_window = rdma_stats.summarize(view_of([0.0, 0.1], tx=[0, 400], rx=[0, 800]), None)
    later = RdmaData((RdmaDeviceData("mlx5_0", "", 0, "", "", "", "", (
        RdmaPortData(1, "InfiniBand", counters={"port_xmit_packets": 1700, "port_rcv_packets": stuck}, **port),)),))
    rows = [rdma_stats.packet_columns(slow), rdma_stats.packet_columns(later)]
    packet_window = rdma_stats.summarize(WindowView([0.0, 5.0], {key: [row[key] for row in rows] for key in rows[0]}), None)

    def exposed(fast: RdmaTrafficData) -> dict:
        samples = list(expose({
            "rdma_traffic": Snapshot(Reading("rdma_traffic", 1.0, fast), bytes_window),
            "rdma": Snapshot(Reading("rdma", 1.0, slow), packet_window),
        }, None))
        FamilyBuilder().extend(samples)  # every sample fits the catalog, none twice
        return {(s.name, s.labels[:3]): s.value for s in samples if s.value is not None}

    live = exposed(RdmaTrafficData((PortTraffic(*IB, 4 * 100, 4 * 200),)))
    labels = (IB[0], str(IB[1]), IB[2])
    assert live[("gpuwait_rdma_port_transmit_packets_total", labels)] == 700
    assert live[("gpuwait_rdma_port_receive_packets_total", labels)] == stuck
    assert live[("gpuwait_rdma_port_traffic_counters_saturated", labels)] == 1
    assert live[("gpuwait_rdma_port_window_transmit_mean_bytes_per_second", labels)] == pytest.approx(4000)
    assert live[("gpuwait_rdma_port_window_transmit_mean_packets_per_second", labels)] == pytest.approx(200)
    # A counter stuck at the 32-bit maximum has no rate, from either tier.
    assert ("gpuwait_rdma_port_window_receive_mean_packets_per_second", labels) not in live

    recorded = exposed(RdmaTrafficData((PortTraffic(*IB, 4 * 100, 4 * 200, 5, 6),)))
    assert recorded[("gpuwait_rdma_port_transmit_packets_total", labels)] == 5
    assert recorded[("gpuwait_rdma_port_receive_packets_total", labels)] == 6
    assert recorded[("gpuwait_rdma_port_traffic_counters_saturated", labels)] == 0


# -- the exporter process -------------------------------------------------------------------

def rdma_series(samples) -> list[tuple[str, dict]]:
    return [(name, labels) for name, rows in samples.items() if name.startswith("gpuwait_rdma_") for labels, _ in rows]


@pytest.mark.integration
def test_exporter_on_the_fixture_host():
    with ExporterProcess(host_args()) as exp:
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_rdma_port_window_transmit_mean_bytes_per_second", device="mlx5_0") is not None
                               and value(s, "gpuwait_rdma_port_window_receive_mean_packets_per_second", device="mlx5_1") is not None
                               and "gpuwait_rdma_device_info" in s else None)
        text = exp.scrape_text()
    ib = dict(device="mlx5_0", port="1", link_layer="InfiniBand")
    roce = dict(device="mlx5_1", port="1", link_layer="Ethernet")
    assert value(samples, "gpuwait_rdma_port_transmit_bytes_total", **ib) == 4 * 1379815342720
    assert value(samples, "gpuwait_rdma_port_receive_bytes_total", **roce) == 4 * 61092847733
    assert value(samples, "gpuwait_rdma_port_transmit_packets_total", **ib) == 2937481820
    assert value(samples, "gpuwait_rdma_port_receive_packets_total", **roce) == 201553917
    # The fixture's counters stand still: the slow tier's window of packets says so.
    assert value(samples, "gpuwait_rdma_port_window_receive_mean_packets_per_second", **roce) == 0.0
    assert value(samples, "gpuwait_rdma_port_traffic_counters_saturated", **ib) == 0
    assert value(samples, "gpuwait_rdma_port_rate_bytes_per_second", **ib) == 50e9
    assert value(samples, "gpuwait_rdma_port_rate_bytes_per_second", **roce) == 12.5e9
    assert value(samples, "gpuwait_rdma_port_state", **ib) == 4
    assert value(samples, "gpuwait_rdma_port_physical_state", **roce) == 5
    assert value(samples, "gpuwait_rdma_port_active", **roce) == 1
    assert value(samples, "gpuwait_rdma_port_link_downed_total", **ib) == 1
    assert value(samples, "gpuwait_rdma_port_transmit_discards_total", **ib) == 3
    assert value(samples, "gpuwait_rdma_port_transmit_wait_ticks_total", **ib) == 48211975
    assert value(samples, "gpuwait_rdma_port_unicast_receive_packets_total", **ib) == 2985120550
    assert value(samples, "gpuwait_rdma_port_hw_events_total", counter="np_cnp_sent", **roce) == 16671
    assert value(samples, "gpuwait_rdma_port_hw_events_total", counter="np_ecn_marked_roce_packets", **roce) == 48122
    assert value(samples, "gpuwait_rdma_port_hw_events_total", counter="local_ack_timeout_err", **ib) == 2
    assert value(samples, "gpuwait_rdma_port_hw_events_total", counter="np_cnp_sent", **ib) is None
    assert value(samples, "gpuwait_rdma_port_hw_events_total", counter="lifespan", **ib) is None
    assert value(samples, "gpuwait_rdma_port_window_transmit_mean_bytes_per_second", **ib) == 0.0
    assert value(samples, "gpuwait_rdma_port_window_receive_max_bytes_per_second", **roce) == 0.0
    (info,) = [lbl for lbl, _ in samples["gpuwait_rdma_device_info"] if lbl["device"] == "mlx5_1"]
    assert info == dict(device="mlx5_1", link_layer="Ethernet", pci_address="0000:a8:00.0", numa_node="1",
                        node_guid="0c42:a103:00b5:7f2e", firmware_version="22.38.1002", hca_type="MT4125",
                        board_id="MT_0000000359")
    assert value(samples, "gpuwait_rdma_port_info", netdev="ens1f0np0", link_width="2X", link_speed="HDR", **roce) == 1
    assert value(samples, "gpuwait_rdma_port_info", netdev="ibp25s0", link_width="4X", link_speed="NDR", **ib) == 1
    assert value(samples, "gpuwait_source_errors_total", source="rdma") == 0
    assert value(samples, "gpuwait_source_errors_total", source="rdma_traffic") == 0
    series = rdma_series(samples)
    assert len(series) > 60
    assert [name for name, labels in series if labels.get("link_layer") not in ("InfiniBand", "Ethernet")] == []
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert lint.stdout + lint.stderr == ""


@pytest.mark.integration
def test_exporter_follows_traffic_and_hot_plug(tree):
    counters = tree / "sys" / IB_PORT / "counters"
    args = [f"--path.procfs={tree / 'proc'}", f"--path.sysfs={tree / 'sys'}", "--collector.rdma",
            "--sample.interval=50ms", "--sample.slow-interval=300ms", "--analysis.interval=200ms", "--analysis.window=5s"]
    with ExporterProcess(args) as exp:
        exp.wait_for(lambda s: value(s, "gpuwait_rdma_port_window_transmit_mean_bytes_per_second", device="mlx5_1") is not None
                     and value(s, "gpuwait_rdma_port_state", device="mlx5_1") is not None)
        words = 1379815342720
        for _ in range(20):  # the HCA sends: the counter moves between samples
            words += 250_000_000
            # a real sysfs read never sees a half-written value: replace the file whole
            (counters / "port_xmit_data.new").write_text(f"{words}\n")
            os.replace(counters / "port_xmit_data.new", counters / "port_xmit_data")
            time.sleep(0.05)
        exp.wait_for(lambda s: (value(s, "gpuwait_rdma_port_window_transmit_max_bytes_per_second", device="mlx5_0") or 0) > 1e9)

        unplug(tree, "mlx5_1")
        exp.wait_for(lambda s: not [1 for _, lbl in rdma_series(s) if lbl.get("device") == "mlx5_1"])
        samples = exp.scrape()
        assert value(samples, "gpuwait_rdma_port_state", device="mlx5_0") == 4
        assert value(samples, "gpuwait_rdma_port_transmit_bytes_total", device="mlx5_0") == 4 * words
        assert value(samples, "gpuwait_source_up", source="rdma_traffic") == 1

        replug(tree, "mlx5_1")
        exp.wait_for(lambda s: value(s, "gpuwait_rdma_port_transmit_bytes_total", device="mlx5_1") is not None
                     and value(s, "gpuwait_rdma_port_state", device="mlx5_1") == 4, timeout=15)
        assert value(exp.scrape(), "gpuwait_source_errors_total", source="rdma_traffic") == 0

# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("rdma"))
def test_rdma_files(text):
    for fn in (rdma_parse.parse_numbered_state, rdma_parse.parse_rate, rdma_parse.parse_counter, rdma_parse.parse_netdev_name):
        only_parse_errors(fn, text)
    only_parse_errors(rdma_parse.parse_name, text, "device")
