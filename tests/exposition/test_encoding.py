"""gpuwait.exposition.encoding writes what prometheus-client's encoders write, to the byte, for
the families gpuwait makes, and leaves every other format to them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client.exposition import choose_encoder

from gpuwait.core.registry import registry, resolve
from gpuwait.exposition import encoding
from gpuwait.exposition.encoding import encoder_for
from gpuwait.exposition.family import Family
from gpuwait.exposition.prometheus import GpuwaitCollector, _encode

TEXT = choose_encoder(None)
TEXT_1 = choose_encoder("text/plain; version=1.0.0; escaping=allow-utf-8")
OPENMETRICS = choose_encoder("application/openmetrics-text; version=1.0.0")
OPENMETRICS_UTF8 = choose_encoder("application/openmetrics-text; version=1.0.0; escaping=allow-utf-8")
FORMATS = [TEXT, TEXT_1, OPENMETRICS, OPENMETRICS_UTF8]


def library(fmt, families) -> bytes:
    encoder, content_type = fmt
    eof = b"# EOF\n" if content_type.startswith("application/openmetrics-text") else b""
    return _encode(encoder, families, eof)  # no content type: prometheus-client's encoder


def ours(fmt, families) -> bytes:
    encoder, content_type = fmt
    assert encoder_for(content_type) is not None, content_type
    eof = b"# EOF\n" if content_type.startswith("application/openmetrics-text") else b""
    return _encode(encoder, families, eof, content_type)


@pytest.fixture(scope="module")
def simulated_blocks():
    """The rendered blocks of a whole exposition: a simulated node with its GPUs, owners and
    verdicts, after 20 s."""
    from gpuwait.simulate.model import get
    from gpuwait.simulate.run import run_virtual

    collectors = list(registry())
    sampler = run_virtual(get("data_pipeline"), resolve(["--analysis.window=10s"])[0], 20.0, collectors)
    rendering = GpuwaitCollector(sampler, collectors).render(1)
    return [block for block in rendering.blocks if not isinstance(block, str)]


@pytest.mark.parametrize("fmt", FORMATS, ids=["text", "text-1.0.0", "openmetrics", "openmetrics-utf8"])
def test_a_whole_exposition_is_prometheus_client_s_to_the_byte(simulated_blocks, fmt):
    for block in simulated_blocks:
        assert ours(fmt, block) == library(fmt, block)
    assert sum(len(f.samples) for block in simulated_blocks for f in block) > 500


_label_value = st.text(alphabet=st.sampled_from(list('ab"\\\n{}=,é\u2028 0')), max_size=8)
_number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70).map(float),
                    st.sampled_from([0.0, -0.0, 1e6, 1234567.0, 1e21, 5e-324, 123456789.125]))


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(["counter", "gauge"]), help_text=_label_value,
       labels=st.lists(st.sampled_from(["zone", "device", "a", "b_2", "le"]), max_size=3, unique=True),
       rows=st.lists(st.tuples(st.lists(_label_value, min_size=3, max_size=3), _number), max_size=6))
def test_generated_families_are_prometheus_client_s_to_the_byte(kind, help_text, labels, rows):
    family = Family("gpuwait_generated_bytes", kind, help_text, tuple(labels))
    for values, number in rows:
        family.add(tuple(values[: len(labels)]), number)
    for fmt in FORMATS:
        assert ours(fmt, [family]) == library(fmt, [family])


def test_a_negative_zero_is_written_as_zero_in_every_format():
    family = Family("gpuwait_generated", "gauge", "zeros.", ("x",))
    family.add(("a",), 0.0)
    family.add(("b",), -0.0)
    for fmt in FORMATS:
        assert ours(fmt, [family]) == library(fmt, [family])
        assert b'{x="b"} 0.0\n' in ours(fmt, [family])


@pytest.mark.parametrize("content_type, writer", [
    ("text/plain; version=0.0.4; charset=utf-8", encoding.encode_text),
    ("text/plain; version=1.0.0; charset=utf-8; escaping=underscores", encoding.encode_text),
    ("text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8", encoding.encode_text),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8", encoding.encode_openmetrics),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8", encoding.encode_openmetrics),
    # Escapings that rewrite legacy names, and OpenMetrics versions with more to write.
    ("text/plain; version=1.0.0; charset=utf-8; escaping=dots", None),
    ("application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=values", None),
    ("application/openmetrics-text; version=2.0.0; charset=utf-8; escaping=underscores", None),
    ("application/json", None),
])
def test_the_formats_written_here(content_type, writer):
    assert encoder_for(content_type) is writer


@settings(max_examples=500, deadline=None)
@given(st.one_of(_number, st.floats(min_value=1e5, max_value=1e22), st.floats(min_value=-1e22, max_value=-1e5)))
def test_numbers_are_written_as_prometheus_client_writes_them(number):
    from prometheus_client.utils import floatToGoString

    assert encoding.go_float(number) == floatToGoString(number)


_media_range = st.builds(
    lambda kind, params, space: (";" + space).join([kind, *params]),
    st.sampled_from(["application/openmetrics-text", "text/plain", " text/plain ", "*/*", "application/json",
                     "text/html", "application/vnd.google.protobuf", "Text/Plain"]),
    st.lists(st.sampled_from(["version=1.0.0", "version=0.0.4", "version=0.0.1", "version=1.0.1", "version=2.0.0",
                              "version=1", "version=1.0", "version=", "version=10.0.0", "version = 1.0.0",
                              "escaping=allow-utf-8", "escaping=underscores", "escaping=dots", "escaping=values",
                              "escaping=bogus", "q=0.5", "q=0.1", "charset=utf-8", "proto=io.prometheus.client.MetricFamily",
                              "encoding=delimited"]), max_size=4),
    st.sampled_from(["", " "]))


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.none(), st.just(""), st.lists(_media_range, min_size=1, max_size=4).map(",".join)))
def test_the_format_is_negotiated_as_prometheus_client_negotiates_it(accept):
    assert encoding.negotiate(accept) == choose_encoder(accept)[1]


@pytest.mark.parametrize("accept", ["text/plain; version=1.0.0-rc.1", "application/openmetrics-text; version=a.b"])
def test_a_version_that_does_not_compare_skips_its_range_instead_of_failing(accept):
    with pytest.raises(TypeError):
        choose_encoder(accept)  # the library's own negotiation fails the request
    assert encoding.negotiate(accept) == encoding.TEXT_0_0_4
    assert encoding.negotiate(accept + ",application/openmetrics-text") == encoding.OPENMETRICS_1_0_0


@pytest.mark.parametrize("accept", [None, "application/openmetrics-text; version=1.0.0; escaping=dots",
                                    "application/openmetrics-text; version=2.0.0", "text/plain; version=1.0.0; escaping=values"])
def test_a_format_left_to_prometheus_client_is_written_by_it(accept, simulated_blocks):
    family = simulated_blocks[0][:3]
    encoder, content_type = choose_encoder(accept)
    assert encoding.negotiate(accept) == content_type
    fallback = encoding.fallback_encoder(accept)
    eof = b"# EOF\n" if content_type.startswith("application/openmetrics-text") else b""
    assert _encode(fallback, family, eof, content_type) == _encode(encoder, family, eof)
