"""The nfs collector: mountstats parser, source, window statistics, exposition (A6, A7)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import HOST_TREE, TEXT_FIXTURES, text_fixture
from fuzz import examples, only_parse_errors, texts
from gpuwait.core.config import Settings
from gpuwait.core.errors import NoData, ParseError, SourceError
from gpuwait.collectors.nfs.parse import Transport, parse_mountstats, split_devices, unescape
from gpuwait.collectors.nfs.payload import ByteCounters, OpCounters
from gpuwait.core.ring import ColumnRing, WindowView
from gpuwait.core.source import HostPaths
from gpuwait.collectors.nfs.source import DEFAULT_OPS, NfsSource, parse_op_list
from gpuwait.collectors.nfs import window as nfs_stats
from support import ExporterProcess, parse_exposition, value

VARIANTS = sorted(p.name for p in (TEXT_FIXTURES / "mountstats").iterdir())


def mountstats(name: str):
    return parse_mountstats(text_fixture("mountstats", name))


def by_mount(parsed):
    return {m.mountpoint: m for m in parsed.mounts}


# ---------------------------------------------------------------------------------------
# parser: exact values on every variant


def test_every_variant_is_covered_below():
    assert set(VARIANTS) == set(EXPECTED)


#: fixture -> mount point -> expected fields. Ops: name -> full OpCounters.
EXPECTED = {
    "nfsv3-tcp-linux4.15.txt": {
        "/home": dict(
            export="nas01:/export/home", fstype="nfs", statvers="1.1", version="3", protocol="tcp",
            age=853201, events=27, rpc=(100003, 3), n_ops=22,
            bytes=ByteCounters(52133909104, 3958902784, 0, 0, 37651035264, 3958902784, 9192147, 966529),
            transports=(Transport("tcp", 2949701, 2949701, 0, 1, 9218530, 0, 65),),
            ops={
                # 8 numbers per op before Linux 5.3: no error count
                "READ": OpCounters(287114, 287114, 0, 36750592, 37685489664, 5210, 1532871, 1541902, None),
                "WRITE": OpCounters(30214, 30215, 1, 3963142144, 4834240, 922, 190233, 251870, None),
                "READDIRPLUS": OpCounters(21540, 21540, 0, 3101760, 152911004, 102, 18210, 18901, None),
                "NULL": OpCounters(0, 0, 0, 0, 0, 0, 0, 0, None),
            },
        ),
    },
    "nfsv4.1-netapp-fsc-linux5.4.txt": {
        "/data/shared": dict(
            export="filer02.corp.example:/vol_shared", fstype="nfs4", statvers="1.1", version="4.1",
            protocol="tcp", age=1209334, events=27, rpc=(100003, 4), n_ops=63,
            bytes=ByteCounters(201998544896, 10768105472, 0, 0, 157702070272, 10768105472, 38501482, 2629096),
            transports=(Transport("tcp", 5222114, 5222114, 0, 2, 15209882, 0, 64),),
            ops={
                "LOOKUP": OpCounters(1402290, 1402301, 0, 291676320, 392641200, 2904, 472931, 481002, 220114),
                "OPEN": OpCounters(512033, 512033, 0, 148489570, 204813200, 1022, 402118, 412290, 1803),
                "GETATTR": OpCounters(2809221, 2809221, 0, 539370432, 662976156, 3310, 623190, 641380, 0),
                "RENEW": OpCounters(0, 0, 0, 0, 0, 0, 0, 0, 0),
            },
        ),
    },
    "nfsv4.1-rdma-linux5.15.txt": {
        "/mnt/scratch": dict(
            export="192.168.100.2:/scratch", fstype="nfs4", statvers="1.1", version="4.1", protocol="rdma",
            age=96233, events=27, rpc=(100003, 4), n_ops=63,
            bytes=ByteCounters(21120928006144, 634090209280, 0, 0, 21046208593920, 634090209280, 5138234520, 154807180),
            # RDMA: the eleventh number is a chunk count, not the slot table size
            transports=(Transport("rdma", 41993822, 41993822, 0, 1, 128329102, 0, None),),
            ops={
                "READ": OpCounters(40220118, 40220118, 0, 6917860296, 21086924652544, 11022, 29911203, 30104552, 0),
                "LOOKUP": OpCounters(120933, 120933, 0, 25153864, 33861240, 22, 20433, 20910, 30212),
            },
        ),
    },
    "nfsv4.2-nconnect-linux6.8.txt": {
        "/projects": dict(
            export="storage.cluster.local:/projects", fstype="nfs4", statvers="1.2", version="4.2",
            protocol="tcp", age=2210394, events=27, rpc=(100003, 4), n_ops=69,
            bytes=ByteCounters(589102300160, 230812598272, 0, 0, 432201030144, 230812598272, 105517829, 56350732),
            # nconnect=4: one line per connection
            transports=(
                Transport("tcp", 5366012, 5366012, 0, 1, 13402212, 0, 128),
                Transport("tcp", 5358201, 5358201, 0, 1, 13387702, 0, 128),
                Transport("tcp", 5371920, 5371920, 0, 1, 13419933, 0, 128),
                Transport("tcp", 5352887, 5352887, 0, 1, 13372004, 0, 128),
            ),
            ops={
                "READ": OpCounters(3301220, 3301220, 0, 554604960, 432611046400, 3021, 15882012, 15972200, 0),
                "OPEN": OpCounters(2410982, 2410982, 0, 699184780, 964392800, 1022, 1321890, 1340211, 40122),
                "OPEN_DOWNGRADE": OpCounters(0, 0, 0, 0, 0, 0, 0, 0, 0),
                "READ_PLUS": OpCounters(0, 0, 0, 0, 0, 0, 0, 0, 0),
            },
        ),
    },
    "statvers1.0-linux2.6.18.txt": {
        "/ifs": dict(
            export="ifs10g.example.com:/ifs", fstype="nfs", statvers="1.0", version="3", protocol="tcp",
            age=1309110, events=25, rpc=(100003, 3), n_ops=22,
            bytes=ByteCounters(4886067767364, 671548484867, 0, 0, 1268384471881, 672425463273, 313433034, 165269865),
            # statvers 1.0: ten numbers, no slot-table fields
            transports=(Transport("tcp", 172670997, 172670964, 33, 1, 3451662215, 293843845166, None),),
            ops={
                "WRITE": OpCounters(22095837, 22095838, 0, 676314934552, 3534070784, 212745097913, 103711782, 212850213433, None),
                "GETATTR": OpCounters(86102054, 86103087, 0, 13515430340, 9643670764, 5776193, 34879595, 42411140, None),
            },
        ),
        "/u/joe": dict(
            export="sparrow:/exported/joe", fstype="nfs", statvers="1.0", version="3", protocol="udp",
            age=274, events=25, rpc=(100003, 3), n_ops=22,
            bytes=ByteCounters(2890211044, 11746, 0, 0, 2891832120, 15340, 706014, 4),
            # UDP 1.0: port bind sends recvs bad_xids req bklog; no connection
            transports=(Transport("udp", 5133, 5130, 0, None, 5133, 0, None),),
            ops={"LOOKUP": OpCounters(880, 882, 2, 121440, 142560, 0, 4012, 6210, None)},
        ),
    },
    "mixed-escaped-stacked-linux6.1.txt": {
        "/mnt/team datasets": dict(
            export="fs1:/srv/team datasets", fstype="nfs", statvers="1.2", version="3", protocol="tcp",
            age=7211, events=27, rpc=(100003, 3), n_ops=22,
            bytes=ByteCounters(16210044928, 0, 0, 0, 15762792448, 0, 3848338, 0),
            transports=(Transport("tcp", 251905, 251905, 0, 1, 503810, 0, 16),),
            ops={"READ": OpCounters(120334, 120334, 0, 15402752, 15796301312, 41, 602211, 604420, 0)},
        ),
        # the NFSv4.2 mount stacked on the NFSv3 one at the same mount point wins
        "/mnt/models": dict(
            export="10.0.3.8:/models", fstype="nfs4", statvers="1.2", version="4.2", protocol="tcp",
            age=3020, events=27, rpc=(100003, 4), n_ops=69,
            bytes=ByteCounters(52690944, 0, 0, 0, 52666368, 0, 12858, 0),
            transports=(Transport("tcp", 751, 751, 0, 1, 760, 0, 4),),
            ops={"LOOKUP": OpCounters(51, 51, 0, 10608, 14280, 0, 10, 10, 2)},
        ),
    },
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_parser_exact_values(variant):
    parsed = mountstats(variant)
    assert parsed.rejected == ()
    mounts = by_mount(parsed)
    assert list(mounts) == list(EXPECTED[variant])
    for mountpoint, want in EXPECTED[variant].items():
        m = mounts[mountpoint]
        assert m.export == want["export"]
        assert m.fstype == want["fstype"]
        assert m.statvers == want["statvers"]
        assert m.nfs_version == want["version"]
        assert m.protocol == want["protocol"]
        assert m.age_seconds == want["age"]
        assert len(m.events) == want["events"]
        assert (m.rpc_program, m.rpc_version) == want["rpc"]
        assert len(m.ops) == want["n_ops"]
        assert m.bytes == want["bytes"]
        assert m.transports == want["transports"]
        for op, counters in want["ops"].items():
            assert m.ops[op] == counters, op


def test_non_nfs_mounts_are_skipped_and_stacked_nfs_mount_is_deduplicated():
    text = text_fixture("mountstats", "mixed-escaped-stacked-linux6.1.txt")
    blocks = split_devices(text)
    # every header becomes a block, local filesystems included, escapes undone
    assert [b.mountpoint for b in blocks].count("/mnt/models") == 3
    assert "/media/usb disk" in [b.mountpoint for b in blocks]
    assert {b.fstype for b in blocks} >= {"sysfs", "proc", "ext4", "tmpfs", "autofs", "nfs", "nfs4"}
    parsed = parse_mountstats(text)
    assert [m.mountpoint for m in parsed.mounts] == ["/mnt/team datasets", "/mnt/models"]
    assert parsed.shadowed == 1
    assert parsed.rejected == ()


def test_mount_options_are_read():
    m = by_mount(mountstats("nfsv4.2-nconnect-linux6.8.txt"))["/projects"]
    assert m.opts["nconnect"] == "4"
    assert m.opts["rsize"] == "1048576"
    assert m.opts["hard"] == ""
    assert by_mount(mountstats("nfsv4.1-rdma-linux5.15.txt"))["/mnt/scratch"].opts["port"] == "20049"


@pytest.mark.parametrize("escaped, plain", [
    ("/mnt/a\\040b", "/mnt/a b"),
    ("/x\\011tab\\012nl\\134bs", "/x\ttab\nnl\\bs"),
    ("/no\\escape", "/no\\escape"),  # not three octal digits: left alone
    ("/short\\04", "/short\\04"),
    ("/high\\400", "/high\\400"),  # above \377 the kernel never prints
    ("/plain", "/plain"),
])
def test_unescape(escaped, plain):
    assert unescape(escaped) == plain


NFS_BLOCK = (
    "device srv:/e mounted on /m with fstype nfs statvers=1.1\n"
    "\topts:\trw,vers=3,proto=tcp\n"
    "\tage:\t10\n"
    "\tevents:\t1 2 3 \n"
    "\tbytes:\t1 2 3 4 5 6 7 8 \n"
    "\tRPC iostats version: 1.1  p/v: 100003/3 (nfs)\n"
    "\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13\n"
    "\tper-op statistics\n"
    "\t        READ: 10 11 0 100 2000 1 5 7 0\n"
    "\n"
)


def test_minimal_block_and_layout_details():
    m = parse_mountstats(NFS_BLOCK).mounts[0]
    assert m.ops["READ"] == OpCounters(10, 11, 0, 100, 2000, 1, 5, 7, 0)
    assert m.bytes == ByteCounters(1, 2, 3, 4, 5, 6, 7, 8)


def test_headers_without_device_name():
    text = (
        "no device mounted on /a with fstype tmpfs\n"
        "device  mounted on /b with fstype tmpfs\n"
        + NFS_BLOCK
    )
    blocks = split_devices(text)
    assert [(b.device, b.mountpoint, b.fstype, b.problem) for b in blocks[:2]] == [
        ("", "/a", "tmpfs", None), ("", "/b", "tmpfs", None)]
    assert [m.mountpoint for m in parse_mountstats(text).mounts] == ["/m"]


def test_lines_a_vendor_client_adds_are_skipped():
    text = NFS_BLOCK.replace("\tRPC iostats", "\tsunrpc-id:\t1f\n\timpl_id:\tname='A B',domain='x',date='0,0'\n\tRPC iostats")
    text = text.replace("\tper-op", "\t\t10.0.0.1 -> 10.0.0.2, state: CONNECTED BOUND\n\tper-op")
    assert parse_mountstats(text).mounts[0].ops["READ"].ops == 10


def test_unknown_transport_is_kept_by_name():
    text = NFS_BLOCK.replace("\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13", "\txprt:\ttcp-tls 1 2 3")
    m = parse_mountstats(text).mounts[0]
    assert m.transports == (Transport("tcp-tls", None, None, None, None, None, None, None),)
    assert m.protocol == "tcp-tls"


def test_version_and_protocol_fall_back_when_options_and_transport_are_absent():
    text = NFS_BLOCK.replace("\topts:\trw,vers=3,proto=tcp\n", "").replace("\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13\n", "")
    m = parse_mountstats(text).mounts[0]
    assert (m.nfs_version, m.protocol) == ("3", "")


@pytest.mark.parametrize("broken, why", [
    (("\tbytes:\t1 2 3 4 5 6 7 8 \n", "\tbytes:\t1 2 3 4 5 6 7 \n"), "bytes has 7 numbers"),
    (("\tbytes:\t1 2 3 4 5 6 7 8 \n", "\tbytes:\t1 2 3 x 5 6 7 8 \n"), "not an unsigned integer"),
    (("\tbytes:\t1 2 3 4 5 6 7 8 \n", ""), "no bytes line"),
    (("READ: 10 11 0 100 2000 1 5 7 0", "READ: 10 11 0 100 2000 1 5"), "need at least 8"),
    (("READ: 10 11 0 100 2000 1 5 7 0", "READ: 10 -11 0 100 2000 1 5 7 0"), "not an unsigned integer"),
    (("READ: 10 11 0 100 2000 1 5 7 0", "READ 10 11 0 100 2000 1 5 7 0"), "not a per-op line"),
    (("\tper-op statistics\n", ""), "before the per-op section"),
    (("statvers=1.1\n", "\n"), "without statvers"),
    (("\tage:\t10\n", "\tage:\t10 11\n"), "age should have one value"),
    (("p/v: 100003/3", "p/v: 100003"), "not program/version"),
    (("\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13", "\txprt:\ttcp 1 2 3 4 5 6 7 8 9"), "need at least 10"),
    (("\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13", "\txprt:\tudp 1 2 3 4 5 6"), "need at least 7"),
    (("\t        READ: 10 11 0 100 2000 1 5 7 0\n", "\t        READ: 1 1 0 1 1 1 1 1 0\n\t        READ: 1 1 0 1 1 1 1 1 0\n"), "listed twice"),
    (("\t        READ: 10 11 0 100 2000 1 5 7 0\n", "\t        READ: 99999999999999999999999 1 0 1 1 1 1 1 0\n"), "not an unsigned integer"),
    (("\t        READ: 10 11 0 100 2000 1 5 7 0\n", "\t        READ: 18446744073709551616 1 0 1 1 1 1 1 0\n"), "larger than 64 bits"),
])
def test_a_broken_block_is_rejected_alone(broken, why):
    old, new = broken
    assert old in NFS_BLOCK
    bad = NFS_BLOCK.replace(old, new).replace("srv:/e mounted on /m", "srv:/bad mounted on /bad")
    text = "device proc mounted on /proc with fstype proc\n" + bad + NFS_BLOCK
    parsed = parse_mountstats(text)
    assert [m.mountpoint for m in parsed.mounts] == ["/m"]
    assert len(parsed.rejected) == 1
    mountpoint, reason = parsed.rejected[0]
    assert mountpoint == "/bad"
    assert why in reason


def test_broken_header_rejects_its_lines_and_keeps_the_rest():
    text = "device srv:/x mounted at /x with fstype nfs statvers=1.1\n\tbytes:\t1 2 3 4 5 6 7 8\n" + NFS_BLOCK
    parsed = parse_mountstats(text)
    assert [m.mountpoint for m in parsed.mounts] == ["/m"]
    assert parsed.rejected[0][0] == ""
    assert "not a mount header" in parsed.rejected[0][1]


def test_statistics_before_any_header_are_rejected():
    parsed = parse_mountstats("\tbytes:\t1 2 3 4 5 6 7 8\n" + NFS_BLOCK)
    assert [m.mountpoint for m in parsed.mounts] == ["/m"]
    assert "before any mount header" in parsed.rejected[0][1]


def test_text_that_is_not_mountstats_raises():
    with pytest.raises(ParseError):
        parse_mountstats("cpu  1 2 3 4\nintr 5\n")


def test_empty_text_has_no_mounts():
    assert parse_mountstats("") == parse_mountstats("\n\n")
    assert parse_mountstats("").mounts == ()


# ---------------------------------------------------------------------------------------
# parser: fuzz. Nothing but ParseError may leave the parser, whatever the text.

_ALPHABET = st.sampled_from(list("device mounted on with fstype nfs4 statvers=1.1 \t\n:0123456789/\\-per-op statistics READ xprt tcp udp rdma bytes: events: age: RPC p/v:"))


def _check(text: str) -> None:
    try:
        parsed = parse_mountstats(text)
    except ParseError:
        return
    for m in parsed.mounts:
        assert m.fstype in ("nfs", "nfs4")
        for c in m.ops.values():
            assert min(c.ops, c.transmissions, c.timeouts, c.execute_ms) >= 0


@given(st.text(max_size=400))
def test_fuzz_arbitrary_text(text):
    _check(text)


@given(st.lists(_ALPHABET, max_size=600).map("".join))
def test_fuzz_format_alphabet(text):
    _check(text)


_FIXTURE_TEXTS = [text_fixture("mountstats", v) for v in VARIANTS]


@given(st.sampled_from(_FIXTURE_TEXTS), st.data())
def test_fuzz_mutated_fixtures(text, data):
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "dup", "token", "cut", "swap"]))
        if action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]))))]
        elif action == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            words = lines[i].split(" ")
            k = data.draw(st.integers(0, max(0, len(words) - 1)))
            words[k] = data.draw(st.sampled_from(["", "-1", "x", "1e3", "٣", "99999999999999999999999", "\\040", "device"]))
            lines[i] = " ".join(words)
        if not lines:
            break
    _check("\n".join(lines))


# ---------------------------------------------------------------------------------------
# window statistics


def settings() -> Settings:
    return Settings({})


def view(times, columns) -> WindowView:
    return WindowView(list(times), {k: list(v) for k, v in columns.items()})


def test_window_latency_rate_and_metadata_share():
    m = "/mnt/datasets"
    v = view([0.0, 5.0, 10.0], {
        ("ops", m, "READ"): [1000, 2000, 4000],
        ("exec", m, "READ"): [50000, 55000, 65000],  # ms: +15000 over +3000 ops = 5 ms each
        ("ops", m, "GETATTR"): [10, 10, 10],
        ("exec", m, "GETATTR"): [3, 3, 3],
        ("all", m): [2000, 4000, 7000],
        ("meta", m): [500, 1500, 2500],
    })
    s = nfs_stats.summarize(v, settings())
    assert s.op_rate[(m, "READ")] == pytest.approx(300.0)
    assert s.op_execute_mean_seconds[(m, "READ")] == pytest.approx(0.005)
    assert s.op_rate[(m, "GETATTR")] == 0.0
    assert (m, "GETATTR") not in s.op_execute_mean_seconds  # no operation, no mean
    assert s.metadata_ratio[m] == pytest.approx(2000 / 5000)


def test_window_reset_never_gives_negative_values():
    m = "/m"
    # a remount between 5 s and 10 s: every counter starts again from a small value
    v = view([0.0, 5.0, 10.0, 15.0], {
        ("ops", m, "READ"): [1000, 2000, 10, 110],
        ("exec", m, "READ"): [9000, 11000, 50, 250],
        ("all", m): [5000, 6000, 20, 220],
        ("meta", m): [4000, 4000, 10, 210],
    })
    s = nfs_stats.summarize(v, settings())
    # the reset interval is skipped: 1000 ops in 5 s, then 100 ops in 5 s
    assert s.op_rate[(m, "READ")] == pytest.approx(1100 / 10)
    assert s.op_execute_mean_seconds[(m, "READ")] == pytest.approx((2000 + 200) / 1000 / 1100)
    assert s.metadata_ratio[m] == pytest.approx((0 + 200) / (1000 + 200))
    assert all(x >= 0 for x in [*s.op_rate.values(), *s.op_execute_mean_seconds.values(), *s.metadata_ratio.values()])


@pytest.mark.parametrize("ops, execute_ms", [
    ([100, 200, 300], [1000, 500, 1500]),  # execute time went back, operations did not
    ([100, 50, 150], [1000, 1500, 2500]),  # operations went back, execute time did not
])
def test_window_pairs_skip_an_interval_where_only_one_counter_went_back(ops, execute_ms):
    m = "/m"
    v = view([0.0, 1.0, 2.0], {("ops", m, "READ"): ops, ("exec", m, "READ"): execute_ms,
                               ("all", m): ops, ("meta", m): [x // 10 for x in execute_ms]})
    s = nfs_stats.summarize(v, settings())
    # only the second interval counts, for both counters of each pair
    assert s.op_execute_mean_seconds[(m, "READ")] == pytest.approx(1000 / 1000 / 100)
    assert s.metadata_ratio[m] == pytest.approx(100 / 100)


def test_window_idle_mount_and_single_sample():
    m = "/m"
    idle = view([0.0, 5.0], {("all", m): [10, 10], ("meta", m): [5, 5], ("ops", m, "READ"): [3, 3], ("exec", m, "READ"): [9, 9]})
    s = nfs_stats.summarize(idle, settings())
    assert s.metadata_ratio == {} and s.op_execute_mean_seconds == {}
    assert s.op_rate == {(m, "READ"): 0.0}
    one = view([0.0], {("all", m): [10], ("ops", m, "READ"): [3]})
    s = nfs_stats.summarize(one, settings())
    assert s.op_rate == {} and s.metadata_ratio == {}


def test_window_mount_appearing_mid_window():
    m = "/new"
    nan = math.nan
    v = view([0.0, 5.0, 10.0], {("ops", m, "READ"): [nan, 100, 600], ("exec", m, "READ"): [nan, 10, 1010]})
    s = nfs_stats.summarize(v, settings())
    assert s.op_rate[(m, "READ")] == pytest.approx(100.0)
    assert s.op_execute_mean_seconds[(m, "READ")] == pytest.approx(0.002)


def test_columns_through_the_ring(tmp_path):
    proc = copy_host_proc(tmp_path)
    source = NfsSource(HostPaths(str(proc), str(tmp_path / "sys")))
    ring = ColumnRing(4)
    first = source.read()
    ring.append(0.0, nfs_stats.columns(first.data))
    rewrite_ops(proc / "self" / "mountstats", {"READ": (1000, 5000), "GETATTR": (300, 150), "LOOKUP": (100, 40)})
    ring.append(5.0, nfs_stats.columns(source.read().data))
    s = nfs_stats.summarize(ring.view(), settings())
    m = "/mnt/datasets"
    assert s.op_execute_mean_seconds[(m, "READ")] == pytest.approx(0.005)
    assert s.op_execute_mean_seconds[(m, "GETATTR")] == pytest.approx(0.0005)
    assert s.op_rate[(m, "READ")] == pytest.approx(200.0)
    assert s.metadata_ratio[m] == pytest.approx(400 / 1400)
    # columns keep only what the statistics use: two per mount and two per selected op present
    assert len(nfs_stats.columns(first.data)) == 2 + 2 * 8  # READDIRPLUS is NFSv3 only


# ---------------------------------------------------------------------------------------
# source


def copy_host_proc(tmp_path):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    shutil.copy(HOST_TREE / "proc" / "self" / "mountstats", proc / "self" / "mountstats")
    return proc


def rewrite_ops(path, increments: dict[str, tuple[int, int]], divisor: int = 1) -> None:
    """Add (ops, execute ms) to op lines, transmissions following ops; ``divisor`` > 1 first
    divides every op counter, as a remount restarts them. Written atomically: the kernel never
    shows a half-written file."""
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        words = line.split()
        if len(words) < 9 or not words[0].endswith(":") or not all(w.isdigit() for w in words[1:]):
            continue
        name = words[0][:-1]
        if divisor == 1 and name not in increments:
            continue
        v = [int(w) // divisor for w in words[1:]]
        ops, execute_ms = increments.get(name, (0, 0))
        v[0] += ops
        v[1] += ops
        v[7] += execute_ms
        lines[i] = "\t%12s: " % name + " ".join(map(str, v))
    tmp = path.with_name(path.name + ".new")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)


def test_source_reads_host_tree():
    source = NfsSource(HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys")))
    assert source.tier == "slow"
    reading = source.read()
    assert reading.errors == ()
    data = reading.data
    assert list(data.mounts) == ["/mnt/datasets"]
    assert data.shadowed == 0
    m = data.mounts["/mnt/datasets"]
    assert (m.export, m.fstype, m.version, m.protocol) == ("10.40.0.10:/datasets", "nfs4", "4.2", "tcp")
    assert list(m.ops) == [op for op in DEFAULT_OPS if op != "READDIRPLUS"]
    assert m.ops["READ"] == OpCounters(5120000, 5120000, 0, 860160000, 671723520000, 5120, 20480000, 25600000, 0)
    assert m.metadata_ops == 6000000 + 4000000 + 1000000 + 2000000
    assert m.all_ops == 5120000 + 2000000 + 1999800 + 1000000 + 6000000 + 4000000 + 1 + 120 + 40000 + 4 + 3 + 1 + 2 + 1 + 1800 + 1 + 1 + 1
    assert m.bytes.server_read == 671088640000


def test_source_selects_operations_and_keeps_metadata_totals(tmp_path):
    proc = copy_host_proc(tmp_path)
    source = NfsSource(HostPaths(str(proc), "/sys"), ops=["CLOSE", "SEQUENCE", "NOSUCHOP"])
    m = source.read().data.mounts["/mnt/datasets"]
    assert list(m.ops) == ["CLOSE", "SEQUENCE"]
    assert m.metadata_ops == 13000000  # independent of the selection


def test_source_missing_file_is_a_source_error(tmp_path):
    source = NfsSource(HostPaths(str(tmp_path / "proc"), "/sys"))
    with pytest.raises(SourceError) as e:
        source.read()
    assert e.value.cause == f"missing:{tmp_path}/proc/self/mountstats"


def test_source_without_nfs_mounts_has_no_data(tmp_path):
    # A host whose mount table holds no NFS mount: the file is there, the kernel has nothing
    # to report for this collector. Not a failure, so no alert fires on a node without NFS.
    proc = copy_host_proc(tmp_path)
    (proc / "self" / "mountstats").write_text(
        "device proc mounted on /proc with fstype proc\n"
        "device /dev/nvme0n1p2 mounted on / with fstype ext4\n"
        "device tmpfs mounted on /run with fstype tmpfs\n")
    source = NfsSource(HostPaths(str(proc), "/sys"))
    with pytest.raises(NoData) as e:
        source.read()
    assert e.value.cause == f"unavailable:{proc}/self/mountstats"
    (proc / "self" / "mountstats").write_text("")
    with pytest.raises(NoData):
        source.read()
    shutil.copy(HOST_TREE / "proc" / "self" / "mountstats", proc / "self" / "mountstats")  # mounted later
    assert list(source.read().data.mounts) == ["/mnt/datasets"]


def test_source_file_that_is_not_mountstats_is_a_source_error(tmp_path):
    proc = copy_host_proc(tmp_path)
    (proc / "self" / "mountstats").write_text("garbage without any mount header\n")
    with pytest.raises(SourceError) as e:
        NfsSource(HostPaths(str(proc), "/sys")).read()
    assert e.value.cause == f"parse:{proc}/self/mountstats"


def test_source_drops_one_garbage_mount_and_keeps_the_others(tmp_path):
    proc = copy_host_proc(tmp_path)
    path = proc / "self" / "mountstats"
    text = path.read_text()
    broken = NFS_BLOCK.replace("srv:/e mounted on /m", "srv:/ckpt mounted on /mnt/checkpoints").replace(
        "READ: 10 11 0 100 2000 1 5 7 0", "READ: 10 11 zero 100 2000 1 5 7 0")
    path.write_text(broken + text + NFS_BLOCK)
    reading = NfsSource(HostPaths(str(proc), "/sys")).read()
    assert list(reading.data.mounts) == ["/mnt/datasets", "/m"]
    assert reading.errors == (f"parse:{path}:/mnt/checkpoints",)


def test_source_counts_stacked_mounts_without_error(tmp_path):
    proc = copy_host_proc(tmp_path)
    shutil.copy(TEXT_FIXTURES / "mountstats" / "mixed-escaped-stacked-linux6.1.txt", proc / "self" / "mountstats")
    reading = NfsSource(HostPaths(str(proc), "/sys")).read()
    assert reading.errors == ()
    assert reading.data.shadowed == 1
    assert reading.data.mounts["/mnt/models"].export == "10.0.3.8:/models"
    assert "/mnt/team datasets" in reading.data.mounts


def test_source_mountstats_path_option(tmp_path):
    proc = copy_host_proc(tmp_path)
    (proc / "1").mkdir()
    shutil.copy(TEXT_FIXTURES / "mountstats" / "nfsv3-tcp-linux4.15.txt", proc / "1" / "mountstats")
    settings = Settings({"path.procfs": str(proc), "path.sysfs": "/sys",
                         "collector.nfs.mountstats-path": "1/mountstats", "collector.nfs.ops": "READ,WRITE"})
    source = NfsSource.from_settings(settings)
    assert source.path == f"{proc}/1/mountstats"
    data = source.read().data
    assert list(data.mounts) == ["/home"]
    assert list(data.mounts["/home"].ops) == ["READ", "WRITE"]
    absolute = NfsSource(HostPaths(str(proc), "/sys"), str(proc / "1" / "mountstats"))
    assert list(absolute.read().data.mounts) == ["/home"]


@pytest.mark.parametrize("given_value, normalised", [
    ("read, getattr ,READ", "READ,GETATTR"),
    (["LOOKUP", "open"], "LOOKUP,OPEN"),
    ("READ_PLUS", "READ_PLUS"),
])
def test_op_list_option(given_value, normalised):
    assert parse_op_list(given_value) == normalised


@pytest.mark.parametrize("bad", ["", " , ", "READ;WRITE", "READ,WR ITE"])
def test_op_list_option_rejects(bad):
    with pytest.raises(ValueError):
        parse_op_list(bad)


# ---------------------------------------------------------------------------------------
# the real exporter process


def other_collectors_off() -> list[str]:
    from gpuwait.core.registry import registry

    return [f"--no-collector.{c.name}" for c in registry() if c.name != "nfs"]


def nfs_exporter(proc) -> ExporterProcess:
    return ExporterProcess([
        f"--path.procfs={proc}", f"--path.sysfs={proc.parent / 'sys'}",
        "--sample.slow-interval=0.2s", "--analysis.interval=0.2s", "--analysis.window=60s",
        *other_collectors_off(),
    ])


@pytest.mark.integration
def test_exporter_serves_nfs_metrics_and_window_statistics(tmp_path):
    proc = copy_host_proc(tmp_path)
    mountstats_path = proc / "self" / "mountstats"
    m = "/mnt/datasets"
    with nfs_exporter(proc) as exp:
        s = exp.wait_for(lambda s: s if value(s, "gpuwait_nfs_operations_total", mount=m, op="READ") else None)
        assert value(s, "gpuwait_nfs_mount_info", mount=m, export="10.40.0.10:/datasets", fstype="nfs4",
                     version="4.2", protocol="tcp") == 1
        assert value(s, "gpuwait_nfs_operations_total", mount=m, op="READ") == 5120000
        assert value(s, "gpuwait_nfs_transmissions_total", mount=m, op="GETATTR") == 6000003
        assert value(s, "gpuwait_nfs_timeouts_total", mount=m, op="LOOKUP") == 1
        assert value(s, "gpuwait_nfs_errors_total", mount=m, op="OPEN") == 1200
        assert value(s, "gpuwait_nfs_request_bytes_total", mount=m, op="READ") == 860160000
        assert value(s, "gpuwait_nfs_response_bytes_total", mount=m, op="READ") == 671723520000
        assert value(s, "gpuwait_nfs_queue_seconds_total", mount=m, op="READ") == pytest.approx(5.12)
        assert value(s, "gpuwait_nfs_rtt_seconds_total", mount=m, op="READ") == pytest.approx(20480.0)
        assert value(s, "gpuwait_nfs_execute_seconds_total", mount=m, op="READ") == pytest.approx(25600.0)
        assert value(s, "gpuwait_nfs_read_bytes_total", mount=m, io="buffered") == 1073741824000
        assert value(s, "gpuwait_nfs_read_bytes_total", mount=m, io="direct") == 2147483648
        assert value(s, "gpuwait_nfs_server_read_bytes_total", mount=m) == 671088640000
        assert value(s, "gpuwait_nfs_shadowed_mounts") == 0
        assert value(s, "gpuwait_source_up", source="nfs") == 1
        # only the selected operations; CLOSE is not among the defaults
        assert {lbl["op"] for lbl, _ in s["gpuwait_nfs_operations_total"]} == set(DEFAULT_OPS) - {"READDIRPLUS"}
        # an idle window: rates are zero, means and the metadata share are absent
        s = exp.wait_for(lambda s: s if value(s, "gpuwait_nfs_window_operations_per_second", mount=m, op="READ") is not None else None)
        assert value(s, "gpuwait_nfs_window_operations_per_second", mount=m, op="READ") == 0
        assert "gpuwait_nfs_window_execute_mean_seconds" not in s
        assert "gpuwait_nfs_window_metadata_ratio" not in s

        rewrite_ops(mountstats_path, {"READ": (1000, 5000), "GETATTR": (300, 150), "LOOKUP": (100, 40)})
        s = exp.wait_for(lambda s: s if value(s, "gpuwait_nfs_window_metadata_ratio", mount=m) is not None else None)
        assert value(s, "gpuwait_nfs_window_metadata_ratio", mount=m) == pytest.approx(400 / 1400)
        assert value(s, "gpuwait_nfs_window_execute_mean_seconds", mount=m, op="READ") == pytest.approx(0.005)
        assert value(s, "gpuwait_nfs_window_execute_mean_seconds", mount=m, op="GETATTR") == pytest.approx(0.0005)
        assert value(s, "gpuwait_nfs_window_execute_mean_seconds", mount=m, op="LOOKUP") == pytest.approx(0.0004)
        assert value(s, "gpuwait_nfs_window_operations_per_second", mount=m, op="READ") > 0

        # a remount: every counter starts again low; nothing in the window may turn negative
        rewrite_ops(mountstats_path, {}, divisor=1000)
        exp.wait_for(lambda s: value(s, "gpuwait_nfs_operations_total", mount=m, op="READ") == 5121)
        time.sleep(0.6)  # three analysis passes
        s = exp.scrape()
        for name in ("gpuwait_nfs_window_operations_per_second", "gpuwait_nfs_window_execute_mean_seconds",
                     "gpuwait_nfs_window_metadata_ratio"):
            assert all(v >= 0 for _, v in s[name]), name
        assert value(s, "gpuwait_nfs_window_execute_mean_seconds", mount=m, op="READ") == pytest.approx(0.005)
        assert value(s, "gpuwait_nfs_window_metadata_ratio", mount=m) == pytest.approx(400 / 1400)


@pytest.mark.integration
def test_exporter_exposition_passes_promtool(tmp_path):
    proc = copy_host_proc(tmp_path)
    with nfs_exporter(proc) as exp:
        exp.wait_for(lambda s: "gpuwait_nfs_window_operations_per_second" in s)
        text = exp.scrape_text()
    assert "gpuwait_nfs_operations_total" in parse_exposition(text)
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_exporter_keeps_serving_when_mountstats_is_missing(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    with nfs_exporter(proc) as exp:
        s = exp.wait_for(lambda s: s if value(s, "gpuwait_source_errors_total", source="nfs") else None)
        assert value(s, "gpuwait_source_up", source="nfs") == 0
        assert "gpuwait_nfs_operations_total" not in s

# -- the shared parser fuzz (tests/support/fuzz.py) ------------------------------------------


@examples
@given(texts("mountstats"))
def test_mountstats(text):
    only_parse_errors(parse_mountstats, text)


@examples
@given(texts("mountstats"))
def test_mountstats_unescape(text):
    only_parse_errors(unescape, text)
