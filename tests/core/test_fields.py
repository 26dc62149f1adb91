"""Counter tokens of the line-per-device pseudo-files (core.fields): unsigned 64-bit decimals
and nothing else, whatever the token."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fuzz import JUNK_TOKENS, examples
from gpuwait.core import fields
from gpuwait.core.errors import ParseError


def only_parse_errors(fn, *args) -> None:
    try:
        fn(*args)
    except ParseError:
        pass


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


def outcome(fn, *args):
    try:
        return fn(*args)
    except ParseError as e:
        return ("ParseError", str(e))


EDGE_TOKENS = ["", "0", "00000000000000000000", "000000000000000000000", str(2**64 - 1), str(2**64),
               "9" * 20, "+1", " 1", "1 ", "1_0", "\u0661", "١٢", "-0", "0x10"]


@examples
@given(st.one_of(st.sampled_from(EDGE_TOKENS), st.text(max_size=24), JUNK_TOKENS,
                 st.integers(-(2**70), 2**70).map(str), st.integers(0, 2**65).map(lambda v: str(v).zfill(20))))
def test_one_counter_is_read_as_a_list_of_one(token):
    # u64 takes a shorter path for one token: it must accept and refuse exactly what u64s does.
    assert outcome(fields.u64, token) == outcome(lambda t: fields.u64s([t])[0], token)
