"""Every parser under gpuwait.parsers, fuzzed: whatever text a kernel, a driver or a broken
file hands it, the only exception that may leave a parser is ParseError.

Each parser gets two kinds of input: arbitrary text, and real fixture texts (every
format's captured variants) mutated line by line (lines dropped, duplicated, cut short, a
token replaced by junk), which is what reaches the deep branches that random text never
gets past the first check of. Under CI (CI=true) each test runs 10,000 examples; elsewhere
the profile's default, so a local run stays quick.
"""

from __future__ import annotations

import dataclasses
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, HOST_TREE, TEXT_FIXTURES
from gpuwait.collectors.cgroup import parse as cgroupfs
from gpuwait.errors import ParseError
from gpuwait.parsers import cgroup, diskstats, fields, mountstats, netdev, pressure, procpid, procstat, rdma

CI_EXAMPLES = 10_000
EXAMPLES = CI_EXAMPLES if os.environ.get("CI", "").lower() in ("1", "true", "yes") else None


def examples(test):
    return settings(max_examples=EXAMPLES)(test) if EXAMPLES else test


def fixture_texts(fmt: str) -> list[str]:
    return [p.read_text() for p in sorted((TEXT_FIXTURES / fmt).glob("*.txt"))]


def tree_texts(*roots) -> list[str]:
    return [p.read_text() for root in roots for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]


SEEDS = {
    "cgroup": fixture_texts("cgroup"),
    # every cgroup file of the captured and written trees (cpu.stat, cpu.max, io.stat, blkio, PSI...)
    "cgroupfs": tree_texts(HOST_TREE / "sys" / "fs" / "cgroup", FIXTURES / "cgroup" / "v1" / "fs" / "cgroup",
                           FIXTURES / "cgroup" / "text"),
    "diskstats": fixture_texts("diskstats"),
    "mountstats": fixture_texts("mountstats"),
    "netdev": fixture_texts("netdev"),
    "pressure": fixture_texts("pressure"),
    "procpid": fixture_texts("procpid"),
    "procstat": [(HOST_TREE / "proc" / "stat").read_text()],
    "rdma": ["ACTIVE\n", "4: ACTIVE\n", "5: LinkUp\n", "400 Gb/sec (4X NDR)\n", "100 Gb/sec (2X HDR)\n",
             "2.5 Gb/sec (1X SDR)\n", "1379815342720\n", "N/A (no PMA)\n", "mlx5_0\n", "ibp25s0\n"],
}

JUNK_TOKENS = st.sampled_from(["", "-1", "18446744073709551616", "99999999999999999999999", "1e309", "nan", "inf",
                               "0x10", "\x00", "N/A", ":", "::", "  ", "\t", "é", "\ufeff", "1.5", "-0", "(", ")"])


@st.composite
def mutated(draw, fmt: str) -> str:
    lines = draw(st.sampled_from(SEEDS[fmt])).split("\n")
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(("drop", "duplicate", "truncate", "token", "insert")))
        if action == "drop":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]))))]
        elif action == "token":
            tokens = lines[i].split(" ")
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[j] = draw(JUNK_TOKENS | st.text(max_size=8))
            lines[i] = " ".join(tokens)
        else:
            lines.insert(i, draw(st.text(max_size=40)))
    return "\n".join(lines)


def texts(fmt: str):
    return st.one_of(st.text(), mutated(fmt))


def only_parse_errors(fn, *args) -> None:
    try:
        fn(*args)
    except ParseError:
        pass


@examples
@given(texts("procstat"))
def test_proc_stat(text):
    only_parse_errors(procstat.parse_proc_stat, text)


@examples
@given(texts("pressure"))
def test_pressure(text):
    only_parse_errors(pressure.parse_pressure, text)


@examples
@given(texts("diskstats"), st.booleans())
def test_diskstats(text, filtered):
    only_parse_errors(diskstats.parse_diskstats, text, (lambda name: not name.startswith("loop")) if filtered else None)


@examples
@given(texts("netdev"), st.booleans())
def test_netdev(text, filtered):
    only_parse_errors(netdev.parse_netdev, text, (lambda name: name != "lo") if filtered else None)


@examples
@given(texts("mountstats"))
def test_mountstats(text):
    only_parse_errors(mountstats.parse_mountstats, text)


@examples
@given(texts("mountstats"))
def test_mountstats_unescape(text):
    only_parse_errors(mountstats.unescape, text)


@examples
@given(texts("cgroup"))
def test_cgroup_and_its_owner(text):
    try:
        entries = cgroup.parse_cgroup(text)
    except ParseError:
        return
    owner = cgroup.owner_from_cgroup(entries, resolve_pod=lambda uid: ("default", "pod"))
    assert owner.kind and owner.id


@examples
@given(st.one_of(st.text(), st.lists(st.sampled_from(["kubepods", "kubepods.slice", "besteffort", "burstable",
       "pod4312ade9-202f-48f0-beb7-fe4764012968", "kubepods-pod4312ade9_202f_48f0_beb7_fe4764012968.slice",
       "cri-containerd-0123456789abcdef.scope", "docker-0123abcd.scope", "slurm", "uid_1000", "job_12345",
       "step_0", "system.slice", "user.slice", "..", ".", "", "x.service", "libpod-01ab.scope"])).map("/".join)))
def test_owner_from_path(path):
    owner = cgroup.owner_from_path(path)
    assert owner.kind and owner.id


@examples
@given(texts("cgroupfs"))
def test_cgroup_files_of_an_owner(text):
    for parse in (cgroupfs.parse_cpu_stat_v2, cgroupfs.parse_cpu_stat_v1, cgroupfs.parse_cpu_max,
                  cgroupfs.parse_cpuacct_usage):
        only_parse_errors(parse, text)
    only_parse_errors(cgroupfs.parse_cpuacct_stat, text, 100)
    only_parse_errors(cgroupfs.parse_cgroup_pressure, text, "io")
    only_parse_errors(cgroupfs.parse_cfs_quota, text, "100000")
    only_parse_errors(cgroupfs.parse_cfs_quota, "20000", text)
    for parse in (cgroupfs.parse_io_stat, cgroupfs.parse_blkio_rwstat):
        try:
            devices, _ = parse(text)
        except ParseError:
            continue
        for counters in devices.values():
            values = counters.values() if isinstance(counters, dict) else dataclasses.astuple(counters)
            assert all(v is None or 0 <= v < 2**64 for v in values)


@examples
@given(texts("procpid"))
def test_pid_stat(text):
    only_parse_errors(procpid.parse_pid_stat, text)


@examples
@given(st.one_of(st.text(), mutated("procpid")))
def test_pid_status_fields(text):
    for fn in (procpid.parse_task_state, procpid.parse_ppid, procpid.parse_children, procpid.parse_uptime):
        only_parse_errors(fn, text)


@examples
@given(texts("rdma"))
def test_rdma_files(text):
    for fn in (rdma.parse_numbered_state, rdma.parse_rate, rdma.parse_counter, rdma.parse_netdev_name):
        only_parse_errors(fn, text)
    only_parse_errors(rdma.parse_name, text, "device")


@examples
@given(st.lists(st.one_of(st.text(max_size=24), JUNK_TOKENS, st.integers(-(2**70), 2**70).map(str)), max_size=20))
def test_counter_tokens(tokens):
    only_parse_errors(fields.u64s, tokens)
    for token in tokens:
        try:
            value = fields.u64(token)
        except ParseError:
            continue
        assert 0 <= value < 2**64
