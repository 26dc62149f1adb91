"""A source of one kernel file reads as its capture decoded: the sampler's tier captures and
the next analysis pass decodes, and both must give what a whole read gives."""

from __future__ import annotations

import re

import pytest

from gpuwait.collectors.cpu.source import CpuSource
from gpuwait.collectors.diskstats.source import DEFAULT_DEVICE_EXCLUDE, DiskstatsSource
from gpuwait.collectors.netdev.source import NetdevSource
from gpuwait.core.errors import SourceError
from gpuwait.core.source import HostPaths

from conftest import HOST_TREE

SOURCES = {
    "cpu": (("stat",), lambda paths: CpuSource(paths, ticks_per_second=100)),
    "diskstats": (("diskstats",), lambda paths: DiskstatsSource(paths, re.compile(DEFAULT_DEVICE_EXCLUDE))),
    "netdev": (("net", "dev"), lambda paths: NetdevSource(paths, re.compile("^lo$"))),
}


def _tree(tmp_path, parts: tuple[str, ...], text: str | None) -> HostPaths:
    proc = tmp_path / "proc"
    target = proc.joinpath(*parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        target.write_text(text)
    return HostPaths(str(proc), str(tmp_path / "sys"))


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_capture_decoded_is_what_a_read_gives(name):
    parts, make = SOURCES[name]
    source = make(HostPaths(str(HOST_TREE / "proc"), str(HOST_TREE / "sys")))
    try:
        t, text = captured = source.capture()
        assert text == HOST_TREE.joinpath("proc", *parts).read_text()
        decoded, read = source.decode(captured), source.read()
        assert decoded.t == t and decoded.source == read.source == name
        assert (decoded.data, decoded.errors) == (read.data, read.errors)
    finally:
        source.close()


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_file_that_does_not_parse_is_captured_and_fails_to_decode_as_a_read_fails(tmp_path, name):
    parts, make = SOURCES[name]
    source = make(_tree(tmp_path, parts, "not the format\n"))
    try:
        captured = source.capture()
        with pytest.raises(SourceError) as decoding:
            source.decode(captured)
        with pytest.raises(SourceError) as reading:
            source.read()
        assert decoding.value.cause == reading.value.cause
        assert decoding.value.cause.startswith("parse:")
    finally:
        source.close()


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_missing_file_fails_the_capture_as_it_fails_a_read(tmp_path, name):
    parts, make = SOURCES[name]
    source = make(_tree(tmp_path, parts, None))
    try:
        with pytest.raises(SourceError) as capturing:
            source.capture()
        with pytest.raises(SourceError) as reading:
            source.read()
        assert capturing.value.cause == reading.value.cause
    finally:
        source.close()
