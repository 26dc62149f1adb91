"""Payload dataclasses <-> JSON values, driven by the dataclasses' type hints.

A trace line must be writable by hand or by another tool, so payloads are encoded as plain
JSON objects named by their fields (no type tags): the source name tells which payload class
a line holds, and the class's annotations tell how to rebuild every field.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Union


class DecodeError(ValueError):
    """A JSON value that does not fit the payload's declared shape; the message gives the path."""


def _show(value: Any, limit: int = 60) -> str:
    """repr for an error line, cut: a trace line may be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        if any(isinstance(k, tuple) for k in obj):
            # JSON keys are strings; a compound key is written as a [key, value] pair instead.
            return [[to_jsonable(k), to_jsonable(v)] for k, v in obj.items()]
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_jsonable(tp: Any, value: Any, path: str = "data") -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return from_jsonable(arg, value, path)
            except DecodeError as e:
                errors.append(str(e))
        raise DecodeError(f"{path}: {_show(value)} fits none of {tp}") from None
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise DecodeError(f"{path}: expected an object for {tp.__name__}")
        hints = _hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp)}
        unknown = set(value) - set(fields)
        if unknown:
            raise DecodeError(f"{path}: unknown field(s) {sorted(unknown)} for {tp.__name__}")
        kwargs = {}
        for name, field in fields.items():
            if name in value:
                kwargs[name] = from_jsonable(hints[name], value[name], f"{path}.{name}")
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise DecodeError(f"{path}: missing field {name!r} of {tp.__name__}")
        return tp(**kwargs)
    if origin is dict or origin is Mapping:  # a Mapping field is decoded as a dict
        key_tp, val_tp = args or (Any, Any)
        if typing.get_origin(key_tp) is tuple:
            if value == {}:
                return {}
            if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
                raise DecodeError(f"{path}: expected an array of [key, value] pairs")
            return {
                from_jsonable(key_tp, k, f"{path}[{i}][0]"): from_jsonable(val_tp, v, f"{path}[{i}][1]")
                for i, (k, v) in enumerate(value)
            }
        if not isinstance(value, dict):
            raise DecodeError(f"{path}: expected an object")
        return {
            from_jsonable(key_tp, _key(key_tp, k, path), f"{path}[{k!r}]"): from_jsonable(val_tp, v, f"{path}[{k!r}]")
            for k, v in value.items()
        }
    if origin in (tuple, list, set, frozenset):
        if not isinstance(value, list):
            raise DecodeError(f"{path}: expected an array")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise DecodeError(f"{path}: expected {len(args)} items, got {len(value)}")
            return tuple(from_jsonable(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item_tp = args[0] if args else Any
        items = [from_jsonable(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return origin(items)
    if typing.get_origin(tp) is typing.Literal:
        if value not in args:
            raise DecodeError(f"{path}: {_show(value)} not one of {args}")
        return value
    if tp is float:
        if value in ("inf", "-inf"):
            return float(value)
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DecodeError(f"{path}: expected a number, got {_show(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DecodeError(f"{path}: expected an integer, got {_show(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise DecodeError(f"{path}: expected a string, got {_show(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise DecodeError(f"{path}: expected true or false, got {_show(value)}")
        return value
    if tp is type(None):
        if value is not None:
            raise DecodeError(f"{path}: expected null")
        return None
    raise DecodeError(f"{path}: cannot decode type {tp!r}")


def _key(key_tp: Any, key: str, path: str) -> Any:
    """JSON object keys are strings; payload dicts may be keyed by int."""
    if key_tp is int:
        if len(key) > 20:
            raise DecodeError(f"{path}: key {_show(key)} is not a 64-bit integer")
        try:
            return int(key)
        except ValueError:
            raise DecodeError(f"{path}: key {_show(key)} is not an integer") from None
    return key
