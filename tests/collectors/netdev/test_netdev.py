"""The netdev collector: /proc/net/dev parser, source, window statistics at the sample rate and
the exporter serving them."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conftest import HOST_TREE, TEXT_FIXTURES, text_fixture
from fuzz import examples, only_parse_errors, texts
from gpuwait.core.registry import resolve
from gpuwait.core.errors import ParseError, SourceError
from gpuwait.collectors.netdev import COLLECTOR
from gpuwait.collectors.netdev.parse import _named_lines, _parse_counter_text, interface_table, parse_netdev
from gpuwait.collectors.netdev.payload import InterfaceCounters, NetDev
from gpuwait.core.ring import ColumnRing, WindowView
from gpuwait.core.sampler import Sampler
from gpuwait.core.source import HostPaths
from gpuwait.collectors.netdev.source import DEFAULT_DEVICE_EXCLUDE, NetdevSource
from gpuwait.collectors.netdev import window as netdev_stats
from host_collectors import copy_procfs, exporter_args, exposed, promtool_problems, rewrite
from single_pass import NOT_COUNTERS, careful, drawn_change, assert_read_alike_or_left, assert_same_as_careful, assert_same_window_row
from support import ExporterProcess, value

EXCLUDE = re.compile(DEFAULT_DEVICE_EXCLUDE)
HEADER = text_fixture("netdev", "6.8.txt").splitlines(keepends=True)[:2]
HEADER_LINES = [line.rstrip("\n") for line in HEADER]

# -- parser ------------------------------------------------------------------------------------

INTERFACES = {
    "2.6.18.txt": ["lo", "eth0", "eth1", "sit0"],
    "4.15-k8s.txt": ["cali3f2a9b1c0d4", "eth0.100", "docker0", "lo", "flannel.1", "veth9a1b2c3", "eth0", "cni0", "tunl0"],
    "6.8.txt": ["lo", "eno1np0", "enp175s0f0np0", "enp175s0f1np1", "ib0", "docker0"],
}

EXPECTED = {
    # "  eth0:3921877410 29114002    0   12    0     0          0      2211 1802334520 18210998    0 ..."
    ("2.6.18.txt", "eth0"): InterfaceCounters(3921877410, 29114002, 0, 12, 0, 0, 0, 2211,
                                              1802334520, 18210998, 0, 0, 0, 0, 0, 0),
    ("2.6.18.txt", "eth1"): InterfaceCounters(123, 2, 0, 0, 0, 0, 0, 0, 846, 11, 0, 0, 0, 0, 0, 0),
    ("4.15-k8s.txt", "flannel.1"): InterfaceCounters(31877120, 99120, 0, 0, 0, 0, 0, 0,
                                                     28102911, 102201, 0, 3, 0, 0, 0, 0),
    ("4.15-k8s.txt", "eth0.100"): InterfaceCounters(88120334, 410229, 0, 0, 0, 0, 0, 1022,
                                                    40110222, 301887, 0, 0, 0, 0, 0, 0),
    # "enp175s0f0np0: 310922841003122 61022310933    3    0    0     3          0         0 308812220931021 ..."
    ("6.8.txt", "enp175s0f0np0"): InterfaceCounters(310922841003122, 61022310933, 3, 0, 0, 3, 0, 0,
                                                    308812220931021, 60133002114, 0, 0, 0, 0, 0, 0),
    ("6.8.txt", "ib0"): InterfaceCounters(1203344, 9011, 0, 0, 0, 0, 0, 0, 903120, 8833, 0, 0, 0, 0, 0, 0),
}


def test_every_fixture_has_expectations():
    assert sorted(p.name for p in (TEXT_FIXTURES / "netdev").iterdir()) == sorted(INTERFACES)


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_parse_fixture_interfaces(name):
    stats = parse_netdev(text_fixture("netdev", name))
    assert list(stats.interfaces) == INTERFACES[name]
    assert stats.malformed == ()


@pytest.mark.parametrize("name,interface", sorted(EXPECTED))
def test_parse_fixture_values(name, interface):
    assert parse_netdev(text_fixture("netdev", name)).interfaces[interface] == EXPECTED[(name, interface)]


def test_parse_default_exclude_on_kubernetes_node():
    stats = parse_netdev(text_fixture("netdev", "4.15-k8s.txt"), lambda i: EXCLUDE.search(i) is None)
    assert list(stats.interfaces) == ["eth0.100", "eth0", "tunl0"]


@pytest.mark.parametrize("text", [
    "",
    "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",  # no header
    "".join(HEADER[:1]) + "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
    "".join(HEADER) + "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n",  # 15 counters
    "".join(HEADER) + "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 -16\n",
    "".join(HEADER) + "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 18446744073709551616\n",
    "".join(HEADER) + "  eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",  # no colon
    "".join(HEADER) + "  : 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",  # no name
    "".join(HEADER) + "  et h0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
])
def test_parse_rejects(text):
    with pytest.raises(ParseError):
        parse_netdev(text)


def test_parse_header_only():
    assert parse_netdev("".join(HEADER)).interfaces == {}


def test_parse_malformed_line_costs_only_its_interface():
    text = text_fixture("netdev", "6.8.txt").replace("   ib0: 1203344 ", "   ib0: 12O3344 ")
    stats = parse_netdev(text)
    assert stats.malformed == ("ib0",)
    assert list(stats.interfaces) == ["lo", "eno1np0", "enp175s0f0np0", "enp175s0f1np1", "docker0"]


def test_parse_duplicate_interface_dropped():
    line = "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
    stats = parse_netdev("".join(HEADER) + line + line + line.replace("eth0", "eth1"))
    assert list(stats.interfaces) == ["eth1"] and stats.malformed == ("eth0",)


def test_parse_keeps_known_fields_of_a_longer_line():
    stats = parse_netdev("".join(HEADER) + "  eth0: " + " ".join(str(i) for i in range(1, 19)) + "\n")
    assert stats.interfaces["eth0"] == InterfaceCounters(*range(1, 17))


def _check_parse(text: str) -> None:
    try:
        stats = parse_netdev(text)
    except ParseError:
        return
    assert not (set(stats.interfaces) & set(stats.malformed))
    for name, counters in stats.interfaces.items():
        assert name and ":" not in name and name == name.strip()
        assert counters.receive_bytes >= 0 and counters.transmit_compressed >= 0


@given(st.text())
def test_fuzz_any_text(text):
    _check_parse(text)


@given(st.text())
def test_fuzz_any_text_after_header(text):
    _check_parse("".join(HEADER) + text)


_TOKEN = st.one_of(
    st.sampled_from([":", " ", "\n", "\t", "-1", "|", "eth0", "1.5", "18446744073709551616", "\x00", "٣", "Inter-|"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=4),
)


@given(st.sampled_from(sorted(INTERFACES)), st.data())
def test_fuzz_near_valid(name, data):
    """A real file with a few spans replaced by likely tokens."""
    text = text_fixture("netdev", name)
    for _ in range(data.draw(st.integers(1, 5))):
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 16)))
        text = text[:start] + data.draw(_TOKEN) + text[end:]
    _check_parse(text)


@given(st.lists(st.tuples(
    st.text(alphabet="eth0.-:| \t", max_size=8),
    st.lists(st.one_of(st.integers(0, 2**65).map(str), st.sampled_from(["", "-", "x"])), max_size=18),
), max_size=6))
def test_fuzz_structured(lines):
    _check_parse("".join(HEADER) + "".join(f"{name}:{' '.join(fields)}\n" for name, fields in lines))


# -- source ------------------------------------------------------------------------------------


# -- the single pass -----------------------------------------------------------------------------


def _careful(lines: list[str], keep=None):
    return careful(_named_lines(["", "", *lines]), _parse_counter_text, keep, "interface")


def _keep(name: str) -> bool:
    return EXCLUDE.search(name) is None


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_the_single_pass_reads_every_fixture_as_the_careful_parser_does(name):
    lines = text_fixture("netdev", name).splitlines()[2:]
    for keep in (None, _keep):
        table = interface_table(lines, keep)
        assert_same_as_careful(table, _careful(lines, keep))
        assert parse_netdev("\n".join(HEADER_LINES + lines), keep) == NetDev(table)


COUNTERS = " ".join(["1"] * 16)


@pytest.mark.parametrize("lines", [
    [], [""], [f"eth0: {COUNTERS}", "", f"eth1: {COUNTERS}"], [f"eth0: {COUNTERS} 17"], [f"eth0: {COUNTERS[:-2]}"],
    [f"eth0 {COUNTERS}"], [f": {COUNTERS}"], [f"eth 0: {COUNTERS}"], [f"eth0: {COUNTERS}", f"eth0: {COUNTERS}"],
    [f"eth0: {COUNTERS[:-1]}x"], [f"eth0: {COUNTERS[:-1]}-1"], [f"eth0: {COUNTERS[:-1]}{2**64}"],
    [f"eth0: {COUNTERS[:-1]}\u0661"], [f"eth0: {COUNTERS[:-1]}1.5"], [f"eth0: {COUNTERS[:-1]}{'0' * 21}"],
    # a name missing on one line and a counter too many on the next: the right number of tokens
    [f" : {COUNTERS[2:]}", f"eth1: {COUNTERS} 1"],
])
def test_the_single_pass_leaves_every_unusual_file_to_the_careful_parser(lines):
    assert interface_table(lines) is None


@st.composite
def _netdevs(draw):
    """The lines of a /proc/net/dev after its header as a kernel prints them (names of
    physical, virtual and container interfaces, counters up to 64 bits, old kernels' first
    counter against the colon), then maybe one change a kernel would not make: a line a
    counter short or long, a blank line, a line without its colon or its name, a name of two
    words, a line listed twice, a number that is not one."""
    pool = ["lo", "eth0", "eth0.100", "eno1np0", "ib0", "docker0", "flannel.1", "veth9a1b2c3", "cali3f2a9b1c0d4", "tunl0"]
    names = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=8, unique=True))
    counter = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 10**6), st.just(0))
    lines = []
    for name in names:
        values = [str(draw(counter)) for _ in range(16)]
        gap = draw(st.sampled_from([" ", "", "   "]))
        lines.append(f"{name:>6}:{gap}" + " ".join(f"{v:>8}" for v in values))
    change, at = drawn_change(draw, lines, ["colon", "no_name", "two_words", "number"])
    if change == "colon":
        lines[at] = lines[at].replace(":", " ", 1)
    elif change == "no_name":
        lines[at] = lines[at].replace(names[at], "", 1)
    elif change == "two_words":
        lines[at] = lines[at].replace(names[at], f"{names[at]} x", 1)
    elif change == "number":
        name, _, rest = lines[at].partition(":")
        parts = rest.split()
        parts[draw(st.integers(0, 15))] = draw(st.sampled_from(NOT_COUNTERS))
        lines[at] = f"{name}: " + " ".join(parts)
    return lines, change


@hypothesis_settings(max_examples=500, deadline=None)
@given(_netdevs(), st.booleans())
def test_the_single_pass_reads_what_the_careful_parser_reads_or_leaves_it_the_lines(drawn, excluding):
    lines, change = drawn
    keep = _keep if excluding else None
    assert_read_alike_or_left(interface_table(lines, keep), lambda: _careful(lines, keep), change)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_single_pass_never_differs_from_the_careful_parser(data):
    lines = text_fixture("netdev", data.draw(st.sampled_from(sorted(INTERFACES)))).splitlines()[2:]
    lines[data.draw(st.integers(0, len(lines) - 1))] = data.draw(st.text(st.characters(codec="ascii"), max_size=60))
    assert_read_alike_or_left(interface_table(lines), lambda: _careful(lines), "changed")


@hypothesis_settings(max_examples=200, deadline=None)
@given(_netdevs())
def test_a_table_reading_and_its_trace_give_the_window_the_same_row(drawn):
    assert_same_window_row(netdev_stats.columns, NetDev, interface_table(drawn[0]))


def _source(tmp_path, text: str | None, exclude: str = DEFAULT_DEVICE_EXCLUDE) -> NetdevSource:
    net = tmp_path / "proc" / "net"
    net.mkdir(parents=True, exist_ok=True)
    if text is not None:
        (net / "dev").write_text(text)
    return NetdevSource(HostPaths(str(tmp_path / "proc"), str(tmp_path / "sys")), re.compile(exclude))


def test_source_host_tree():
    reading = NetdevSource(HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys")), EXCLUDE).read()
    assert reading.source == "netdev" and reading.errors == ()
    assert list(reading.data.interfaces) == ["eth0", "eth1", "bond0", "ens1f0np0", "ens1f1np1", "ib0"]


def test_source_option_changes_exclusion(tmp_path):
    source = _source(tmp_path, text_fixture("netdev", "6.8.txt"), r"^(docker\d+|eno.*)$")
    assert list(source.read().data.interfaces) == ["lo", "enp175s0f0np0", "enp175s0f1np1", "ib0"]


def test_source_missing_file(tmp_path):
    with pytest.raises(SourceError) as e:
        _source(tmp_path, None).read()
    assert e.value.cause == f"missing:{tmp_path}/proc/net/dev"


def test_source_garbage_file(tmp_path):
    with pytest.raises(SourceError) as e:
        _source(tmp_path, "garbage: 1 2 3\n").read()
    assert e.value.cause == f"parse:{tmp_path}/proc/net/dev"


def test_source_bad_line_drops_only_its_interface(tmp_path):
    text = text_fixture("netdev", "6.8.txt").replace("eno1np0: 90122003341 130221009", "eno1np0: 90122003341")
    reading = _source(tmp_path, text).read()
    assert reading.errors == (f"parse:{tmp_path}/proc/net/dev:eno1np0",)
    assert list(reading.data.interfaces) == ["enp175s0f0np0", "enp175s0f1np1", "ib0"]


def test_sampler_counts_the_bad_line_each_read(tmp_path):
    _source(tmp_path, text_fixture("netdev", "6.8.txt").replace("   ib0: 1203344    9011 ", "   ib0: 1203344    9011 x "))
    sampler = Sampler([COLLECTOR], resolve([f"--path.procfs={tmp_path / 'proc'}"])[0])
    state = sampler.states["netdev"]
    for reads in (1, 2):
        sampler.sample_once(state)
        assert state.up and state.errors == reads
    assert list(state.latest.data.interfaces) == ["eno1np0", "enp175s0f0np0", "enp175s0f1np1"]
    assert state.logged_partial == {f"parse:{tmp_path}/proc/net/dev:ib0"}
    assert state.active_causes == set()  # the source itself is up


# -- window statistics -----------------------------------------------------------------------


def _counters(rx: int, tx: int) -> InterfaceCounters:
    return InterfaceCounters(rx, 0, 0, 0, 0, 0, 0, 0, tx, 0, 0, 0, 0, 0, 0, 0)


def _view(samples: list[tuple[float, dict[str, tuple[int, int]]]]) -> WindowView:
    ring = ColumnRing(len(samples) + 1)
    for t, interfaces in samples:
        data = NetDev({name: _counters(*rx_tx) for name, rx_tx in interfaces.items()})
        ring.append(t, netdev_stats.columns(data))
    return ring.view()


def test_window_steady_and_bursty():
    # ens1f0np0 receives 1 MB every 100 ms; transmits 4 MB in one interval of four, nothing otherwise.
    rx = [0, 1_000_000, 2_000_000, 3_000_000, 4_000_000]
    tx = [0, 0, 4_000_000, 4_000_000, 4_000_000]
    view = _view([(0.1 * i, {"ens1f0np0": (rx[i], tx[i])}) for i in range(5)])
    stats = netdev_stats.summarize(view, None)
    receive, transmit = stats.receive["ens1f0np0"], stats.transmit["ens1f0np0"]
    assert receive.mean_bytes_per_second == pytest.approx(10_000_000.0)
    assert receive.max_bytes_per_second == pytest.approx(10_000_000.0)
    assert receive.burstiness == pytest.approx(0.0, abs=1e-9)
    assert transmit.mean_bytes_per_second == pytest.approx(10_000_000.0)
    assert transmit.max_bytes_per_second == pytest.approx(40_000_000.0)
    # rates 0, 40, 0, 0 MB/s: mean 10, standard deviation sqrt(3) * 10
    assert transmit.burstiness == pytest.approx(math.sqrt(3.0))


def test_window_idle_interface():
    stats = netdev_stats.summarize(_view([(0.0, {"ib0": (5, 7)}), (0.1, {"ib0": (5, 7)}), (0.2, {"ib0": (5, 7)})]), None)
    assert stats.receive["ib0"] == netdev_stats.ThroughputWindowStats(0.0, 0.0, 0.0)


def test_window_counter_reset_gives_no_negative_rate():
    # The driver was reloaded between the 2nd and 3rd sample and its counters start over.
    rx = [9_000_000, 9_500_000, 100, 500_100]
    view = _view([(0.1 * i, {"eth0": (rx[i], 0)}) for i in range(4)])
    receive = netdev_stats.summarize(view, None).receive["eth0"]
    assert receive.mean_bytes_per_second == pytest.approx(5_000_000.0)
    assert receive.max_bytes_per_second == pytest.approx(5_000_000.0)
    assert receive.burstiness == pytest.approx(0.0, abs=1e-9)


def test_window_interface_vanishing_mid_window():
    samples = [(0.1 * i, {"eth0": (1000 * i, 0), **({"veth0": (200 * i, 300 * i)} if i < 3 else {})}) for i in range(6)]
    stats = netdev_stats.summarize(_view(samples), None)
    assert sorted(stats.receive) == ["eth0", "veth0"]
    assert stats.transmit["veth0"].mean_bytes_per_second == pytest.approx(3000.0)
    assert stats.receive["eth0"].mean_bytes_per_second == pytest.approx(10000.0)


def test_window_single_sample_has_no_rates():
    stats = netdev_stats.summarize(_view([(0.0, {"eth0": (1, 1)})]), None)
    assert stats.receive["eth0"] == netdev_stats.ThroughputWindowStats(None, None, None)


# -- the exporter process --------------------------------------------------------------------


def _grow(text: str, interface: str, rx_bytes: int, tx_bytes: int) -> str:
    out = []
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        if colon and name.strip() == interface:
            v = [int(f) for f in rest.split()]
            v[0] += rx_bytes
            v[8] += tx_bytes
            line = "%6s: %7d %7d %4d %4d %4d %5d %10d %9d %8d %7d %4d %4d %4d %5d %7d %10d" % (interface, *v)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.integration
def test_exporter_serves_netdev(tmp_path):
    proc = copy_procfs(tmp_path)
    path = proc / "net" / "dev"
    with ExporterProcess(exporter_args(proc)) as exp:
        samples = exp.wait_for(lambda s: s if value(s, "gpuwait_network_window_receive_burstiness", interface="ib0") is not None else None)
        assert {lbl["interface"] for lbl, _ in samples["gpuwait_network_receive_bytes_total"]} == {
            "eth0", "eth1", "bond0", "ens1f0np0", "ens1f1np1", "ib0"}
        # "ens1f0np0: 481220339120441 98012211093    2    0    0     2          0         0 479902113398120 97801220331    0    0 ..."
        i = {"interface": "ens1f0np0"}
        assert exposed(samples, "gpuwait_network_receive_bytes_total", **i) == 481220339120441
        assert exposed(samples, "gpuwait_network_receive_packets_total", **i) == 98012211093
        assert exposed(samples, "gpuwait_network_receive_errors_total", **i) == 2
        assert exposed(samples, "gpuwait_network_receive_drops_total", **i) == 0
        assert exposed(samples, "gpuwait_network_transmit_bytes_total", **i) == 479902113398120
        assert exposed(samples, "gpuwait_network_transmit_packets_total", **i) == 97801220331
        assert exposed(samples, "gpuwait_network_transmit_errors_total", **i) == 0
        assert exposed(samples, "gpuwait_network_receive_drops_total", interface="eth0") == 118
        assert exposed(samples, "gpuwait_network_window_receive_mean_bytes_per_second", **i) == 0.0
        assert exposed(samples, "gpuwait_network_window_transmit_max_bytes_per_second", **i) == 0.0

        # One 2 GB burst on the RoCE port between two samples, nothing before or after.
        rewrite(path, _grow(path.read_text(), "ens1f0np0", 2_000_000_000, 1_000_000_000))
        samples = exp.wait_for(lambda s: s if (value(s, "gpuwait_network_window_receive_burstiness", **i) or 0) > 1.0 else None)
        assert exposed(samples, "gpuwait_network_receive_bytes_total", **i) == 481220339120441 + 2_000_000_000
        mean = exposed(samples, "gpuwait_network_window_receive_mean_bytes_per_second", **i)
        peak = exposed(samples, "gpuwait_network_window_receive_max_bytes_per_second", **i)
        assert 0.0 < mean < peak
        assert exposed(samples, "gpuwait_network_window_transmit_max_bytes_per_second", **i) == pytest.approx(peak / 2)
        assert exposed(samples, "gpuwait_network_window_receive_max_bytes_per_second", interface="eth0") == 0.0
        assert exposed(samples, "gpuwait_source_errors_total", source="netdev") == 0.0
        assert promtool_problems(exp.scrape_text()) == ""


@pytest.mark.integration
def test_exporter_device_exclude_option(tmp_path):
    proc = copy_procfs(tmp_path)
    with ExporterProcess([*exporter_args(proc), "--collector.netdev.device-exclude=^(eth\\d+|bond\\d+)$"]) as exp:
        samples = exp.wait_for(lambda s: s if "gpuwait_network_receive_bytes_total" in s else None)
        assert {lbl["interface"] for lbl, _ in samples["gpuwait_network_receive_bytes_total"]} == {
            "lo", "ens1f0np0", "ens1f1np1", "ib0", "docker0", "veth4c1e9a2", "vethd07f3b6"}

# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("netdev"), st.booleans())
def test_netdev(text, filtered):
    only_parse_errors(parse_netdev, text, (lambda name: name != "lo") if filtered else None)
