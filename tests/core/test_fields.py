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
