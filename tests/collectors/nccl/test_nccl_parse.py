"""NCCL Inspector's dump formats, read from hand-written files of the shapes its writer emits
(NVIDIA/nccl plugins/profiler/inspector: JSON lines, and both generations of its Prometheus
text)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import text_fixture
from fuzz import SEEDS, examples, only_parse_errors, texts
from gpuwait.collectors.nccl.parse import (
    COLLECTIVE, P2P, UnsupportedFormat, device_ordinal, message_bytes, parse_json_lines, parse_json_record,
    parse_prom_text, prom_operations,
)
from gpuwait.core.errors import ParseError


def fixture_bytes(name: str) -> bytes:
    return text_fixture("nccl", name).encode()


def test_json_lines_of_a_training_process():
    lines = parse_json_lines(fixture_bytes("json-2.30-training.log"))
    assert (lines.malformed, lines.unsupported, lines.rest) == (0, 0, b"")
    ops = lines.operations
    assert [op.op for op in ops] == ["AllReduce", "AllReduce", "ReduceScatter", "AllGather", "Send", "Recv",
                                     "AllReduce", "Broadcast"]
    first = ops[0]
    assert (first.kind, first.comm, first.comm_name, first.rank, first.n_ranks, first.n_nodes) == (
        COLLECTIVE, "0x7f8c496ae9f661", "default_pg", 2, 8, 1)
    assert (first.pid, first.hostname, first.device, first.seq) == (4242, "hgx-a17", None, 1407)
    assert first.msg_bytes == 268435456
    assert first.exec_seconds == pytest.approx(1174e-6)
    assert first.bus_gbs == pytest.approx(400.138030)
    assert first.timing_source == "kernel_gpu"
    assert first.unix == pytest.approx(1764081137.748202)
    send = ops[4]
    assert (send.kind, send.op, send.seq, send.comm_name) == (P2P, "Send", 5121, "pp_group_1")
    assert send.exec_seconds == pytest.approx(93e-6)
    # the verbose record's event traces are extra fields, not a different record
    assert ops[6].seq == 1409 and ops[6].exec_seconds == pytest.approx(1169e-6)


def test_json_lines_of_nccl_2_28_without_communicator_names():
    ops = parse_json_lines(fixture_bytes("json-2.28.log")).operations
    assert [op.comm_name for op in ops] == ["", "", ""]
    assert [op.timing_source for op in ops] == ["kernel_gpu", "kernel_cpu", "collective_cpu"]
    assert ops[2].n_nodes == 2 and ops[2].n_ranks == 16


def test_unknown_versions_counted_bad_lines_counted_partial_line_kept():
    data = fixture_bytes("json-mixed-versions.log")
    lines = parse_json_lines(data)
    assert [op.seq for op in lines.operations] == [17, 20]
    assert lines.unsupported == 1  # the v5.0 record
    assert lines.malformed == 2  # a negative execution time, and a log line that is not JSON
    assert lines.rest.startswith(b'{"header"') and not lines.rest.endswith(b"}")
    # the rest of the line arrives: the record it completes is read
    rest = lines.rest + b'tes":104857600,"coll_exec_time_us":8811,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":11.9,"coll_busbw_gbs":11.9}}\n'
    assert [op.seq for op in parse_json_lines(rest).operations] == [21]


def test_blank_lines_and_the_nul_hole_of_a_copytruncate_are_not_records():
    line = text_fixture("nccl", "json-2.28.log").splitlines()[0].encode()
    lines = parse_json_lines(b"\n\n" + b"\0" * 300 + line + b"\n  \n")
    assert len(lines.operations) == 1 and lines.malformed == 0


def record(**changes) -> dict:
    obj = json.loads(text_fixture("nccl", "json-2.30-training.log").splitlines()[0])
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = obj
        for parent in parents:
            target = target[parent]
        if value is KeyError:
            del target[leaf]
        else:
            target[leaf] = value
    return obj


@pytest.mark.parametrize("changes", [
    {"header__rank": 8},                      # rank beyond n_ranks
    {"header__rank": -1},
    {"header__rank": True},
    {"header__n_ranks": 0},
    {"header__id": ""},
    {"header__id": 7},
    {"metadata__pid": 0},
    {"metadata__pid": "4242"},
    {"metadata__dump_timestamp_us": 1.5},
    {"coll_perf__coll_exec_time_us": KeyError},
    {"coll_perf__coll_exec_time_us": 10 ** 400},
    {"coll_perf__coll_msg_size_bytes": "big"},
    {"coll_perf__coll_busbw_gbs": -1.0},
    {"coll_perf__coll": KeyError},
    {"coll_perf": KeyError},
    {"header": KeyError},
    {"metadata__inspector_output_format_version": KeyError},
])
def test_a_field_without_its_documented_shape_is_a_parse_error(changes):
    with pytest.raises(ParseError) as caught:
        parse_json_record(json.dumps(record(**changes)))
    assert not isinstance(caught.value, UnsupportedFormat)


def test_optional_fields_and_the_writers_nan():
    op = parse_json_record(json.dumps(record(coll_perf__coll_busbw_gbs="nan", coll_perf__coll_sn=KeyError,
                                             metadata__dump_timestamp_us=KeyError, header__nnodes=KeyError,
                                             coll_perf__coll_timing_source=KeyError, metadata__hostname=KeyError)))
    assert (op.bus_gbs, op.seq, op.unix, op.n_nodes, op.timing_source, op.hostname) == (None, None, None, None, "", "")
    future = record(coll_perf__coll_queue_time_us=12, metadata__gpu_uuid="GPU-x", header__gpu_device_id="GPU3")
    assert parse_json_record(json.dumps(future)).device == 3


def test_other_format_versions_are_unsupported_not_malformed():
    with pytest.raises(UnsupportedFormat):
        parse_json_record(json.dumps(record(metadata__inspector_output_format_version="v3.0")))


def test_prometheus_text_of_nccl_2_29_one_sample_set_per_communicator():
    parsed = prom_operations(parse_prom_text(text_fixture("nccl", "prom-2.29.prom")), unix=1760671950.0)
    assert (parsed.malformed, parsed.unsupported) == (0, 0)
    by_comm = {op.comm: op for op in parsed.operations}
    dp = by_comm["0xd152c00f111816"]
    assert (dp.kind, dp.op, dp.rank, dp.n_ranks, dp.n_nodes, dp.device, dp.seq, dp.hostname, dp.pid) == (
        COLLECTIVE, "AllReduce", 4, 8, 1, 4, 228924, "pool0-0002", 0)
    assert dp.msg_bytes == 2 * 2 ** 30
    assert dp.exec_seconds == pytest.approx(9498e-6) and dp.bus_gbs == pytest.approx(395.673)
    assert dp.unix == 1760671907.0  # the sample's own timestamp label, 2025-10-17T03:31:47Z
    assert by_comm["0x3ab4497c01d2f8"].n_nodes == 2


def test_prometheus_text_of_nccl_2_30_buckets():
    parsed = prom_operations(parse_prom_text(text_fixture("nccl", "prom-2.30.prom")), unix=1764081300.0)
    assert (parsed.malformed, parsed.unsupported) == (0, 0)
    ops = sorted(parsed.operations, key=lambda op: op.msg_bytes)
    assert [(op.kind, op.op, op.msg_bytes) for op in ops] == [
        (COLLECTIVE, "AllGather", 64 * 2 ** 20), (P2P, "Send", 512 * 2 ** 20), (COLLECTIVE, "AllReduce", 4 * 2 ** 30)]
    assert {(op.comm, op.comm_name, op.rank, op.pid, op.device, op.hostname, op.n_ranks) for op in ops} == {
        ("DP Group 0", "DP Group 0", -1, 0, 0, "nvl72004-T01", 4)}
    assert ops[2].exec_seconds == pytest.approx(9498.47e-6) and ops[2].bus_gbs == pytest.approx(678.263)
    assert {op.unix for op in ops} == {1764081300.0}  # the file's time: buckets carry none


def test_prometheus_text_of_an_unknown_format_minor_and_other_exporters_metrics():
    parsed = prom_operations(parse_prom_text(text_fixture("nccl", "prom-future.prom")))
    assert parsed.operations == [] and parsed.unsupported == 1 and parsed.malformed == 0


def test_prometheus_text_syntax():
    samples = parse_prom_text('# HELP x y\n\na_b{l="v\\"q\\\\",m="2",} 1.5 1700000000000\nc NaN\n')
    assert [(s.name, s.labels) for s in samples] == [("a_b", {"l": 'v"q\\', "m": "2"}), ("c", {})]
    for bad in ('a{l="x} 1', "a{l=x} 1", "a", 'a{l="1",l="2"} 3', "a{} one", "9a 1"):
        with pytest.raises(ParseError):
            parse_prom_text(bad)


def test_sizes_and_devices():
    assert message_bytes("0B") == 0 and message_bytes("512B") == 512
    assert message_bytes("4-5GB") == 4 * 2 ** 30 and message_bytes("1.50KB") == 1536
    assert device_ordinal("GPU7") == 7 and device_ordinal("3") == 3
    for bad in ("", "GB", "4-GB", "1e3B"):
        with pytest.raises(ParseError):
            message_bytes(bad)
    for bad in ("GPU", "GPU-1", "gpu1", "12345"):
        with pytest.raises(ParseError):
            device_ordinal(bad)


# -- fuzzed: whatever a writer or a broken file leaves, only ParseError leaves a parser -------

NCCL_RECORDS = [json.loads(line) for text in SEEDS["nccl_json"] for line in text.splitlines()
                if line.endswith("}}") and '"v4.0"' in line]
JSON_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8),
                      st.sampled_from(["nan", "v4.0", "v5.0", "", "GPU3", "kernel_gpu"]), st.just([]), st.just({}))


@st.composite
def nccl_record(draw) -> str:
    """A record the plugin could have written, with some of its values (at any depth)
    replaced, removed, or joined by unknown ones."""
    record = json.loads(json.dumps(draw(st.sampled_from(NCCL_RECORDS))))
    for _ in range(draw(st.integers(0, 4))):
        target = record
        while target:
            key = draw(st.sampled_from(sorted(target)))
            if isinstance(target[key], dict) and target[key] and draw(st.booleans()):
                target = target[key]
                continue
            break
        action = draw(st.sampled_from(("replace", "remove", "add"))) if target else "add"
        if action == "replace":
            target[key] = draw(JSON_JUNK)
        elif action == "remove":
            del target[key]
        else:
            target[draw(st.text(max_size=12))] = draw(JSON_JUNK)
    return json.dumps(record)


def test_the_fuzzed_records_start_from_real_ones():
    assert len(NCCL_RECORDS) >= 10 and SEEDS["nccl_prom"]


@examples
@given(st.one_of(nccl_record(), texts("nccl_json")))
def test_json_record_fuzzed(text):
    only_parse_errors(parse_json_record, text)


@examples
@given(st.one_of(st.binary(), st.lists(st.one_of(nccl_record(), texts("nccl_json"))).map("\n".join).map(str.encode)))
def test_json_lines_fuzzed(data):
    lines = parse_json_lines(data)  # counts what it cannot read, never raises
    assert b"\n" not in lines.rest
    assert len(lines.operations) + lines.malformed + lines.unsupported <= data.count(b"\n")


@examples
@given(texts("nccl_prom"), st.none() | st.floats(0, 2e9))
def test_prometheus_text_fuzzed(text, unix):
    try:
        samples = parse_prom_text(text)
    except ParseError:
        return
    prom_operations(samples, unix)  # counts what it cannot read, never raises
