import math
from dataclasses import dataclass

import pytest

from gpuwait.collectors.cpu.payload import CpuData
from gpuwait.trace.codec import DecodeError, from_jsonable, to_jsonable


@dataclass(frozen=True, slots=True)
class Link:
    index: int
    tx_bytes: float | None


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    links: tuple[Link, ...]
    by_port: dict[int, float]
    flags: tuple[str, ...] = ()


def test_cpu_payload_round_trip():
    data = CpuData({"0": {"user": 1.5, "idle": 2.0}}, 3, None)
    assert from_jsonable(CpuData, to_jsonable(data)) == data


def test_nested_round_trip_with_int_keys_and_optionals():
    dev = Device("gpu0", (Link(0, 12.0), Link(1, None)), {1: 2.5, 2: math.inf})
    encoded = to_jsonable(dev)
    assert encoded["by_port"] == {"1": 2.5, "2": "inf"}
    assert from_jsonable(Device, encoded) == dev


def test_defaults_may_be_omitted():
    assert from_jsonable(Device, {"name": "x", "links": [], "by_port": {}}).flags == ()


@pytest.mark.parametrize(
    "value,needle",
    [
        ({"name": "x", "links": []}, "missing field 'by_port'"),
        ({"name": "x", "links": [], "by_port": {}, "bogus": 1}, "unknown field"),
        ({"name": 3, "links": [], "by_port": {}}, "data.name: expected a string"),
        ({"name": "x", "links": [{"index": "a", "tx_bytes": 1}], "by_port": {}}, "data.links[0].index"),
        ({"name": "x", "links": [], "by_port": {"one": 1.0}}, "is not an integer"),
        ([], "expected an object"),
    ],
)
def test_bad_values_name_the_path(value, needle):
    with pytest.raises(DecodeError, match=needle.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        from_jsonable(Device, value)


@dataclass(frozen=True, slots=True)
class Stalls:
    seconds: dict[tuple[str, str], float]


def test_compound_keys_are_written_as_pairs():
    data = Stalls({("cpu", "some"): 1.5, ("io", "full"): 0.25})
    encoded = to_jsonable(data)
    assert encoded == {"seconds": [[["cpu", "some"], 1.5], [["io", "full"], 0.25]]}
    assert from_jsonable(Stalls, encoded) == data
    assert from_jsonable(Stalls, {"seconds": {}}) == Stalls({})
    with pytest.raises(DecodeError, match="pairs"):
        from_jsonable(Stalls, {"seconds": [["cpu", 1.0, 2.0]]})
