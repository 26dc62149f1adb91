"""Shared by the fuzz tests of every parser (each in the test module of its package):
whatever text a kernel, a driver or a broken file hands a parser, the only exception that
may leave it is ParseError.

Each parser gets two kinds of input: arbitrary text, and real fixture texts (every
format's captured variants) mutated line by line (lines dropped, duplicated, cut short, a
token replaced by junk), which is what reaches the deep branches that random text never
gets past the first check of. Under CI (CI=true) each test runs 10,000 examples; elsewhere
the profile's default, so a local run stays quick.
"""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st

from conftest import CGROUP_V1_TREE, HOST_TREE, TEXT_FIXTURES
from gpuwait.core.errors import ParseError

CI_EXAMPLES = 10_000
EXAMPLES = CI_EXAMPLES if os.environ.get("CI", "").lower() in ("1", "true", "yes") else None


def examples(test):
    return settings(max_examples=EXAMPLES)(test) if EXAMPLES else test


def fixture_texts(fmt: str, pattern: str = "*.txt") -> list[str]:
    return [p.read_text() for p in sorted((TEXT_FIXTURES / fmt).glob(pattern))]


def tree_texts(*roots) -> list[str]:
    """Every file of captured trees (a cgroup hierarchy holds files of many formats)."""
    return [p.read_text() for root in roots for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]


SEEDS = {
    "cgroup": fixture_texts("cgroup"),
    # every cgroup file of the v2 and v1 trees (cpu.stat, cpu.max, io.stat, blkio, PSI...) and
    # the single files of other kernels
    "cgroupfs": tree_texts(HOST_TREE / "sys" / "fs" / "cgroup", CGROUP_V1_TREE / "sys" / "fs" / "cgroup")
    + fixture_texts("cgroupfs"),
    "diskstats": fixture_texts("diskstats"),
    "mountstats": fixture_texts("mountstats"),
    "nccl_json": fixture_texts("nccl", "*.log"),
    "nccl_prom": fixture_texts("nccl", "*.prom"),
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
