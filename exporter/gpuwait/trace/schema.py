"""Prints the payload schema of every source, from the classes the trace reader decodes with:
``python -m gpuwait.trace.schema``."""

from __future__ import annotations

import collections.abc
import dataclasses
import sys
import typing

from gpuwait.core.registry import registry


def describe(tp, indent: int = 0, seen: set | None = None) -> list[str]:
    seen = seen if seen is not None else set()
    lines = []
    pad = "  " * indent
    for field in dataclasses.fields(tp):
        hint = typing.get_type_hints(tp)[field.name]
        optional = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        lines.append(f"{pad}- {field.name}: {type_name(hint)}{' (optional)' if optional else ''}")
        for inner in nested_dataclasses(hint):
            if inner not in seen:
                seen.add(inner)
                lines.append(f"{pad}  {inner.__name__}:")
                lines += describe(inner, indent + 2, seen)
    return lines


def nested_dataclasses(tp) -> list[type]:
    if dataclasses.is_dataclass(tp):
        return [tp]
    return [c for arg in typing.get_args(tp) for c in nested_dataclasses(arg)]


def type_name(tp) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and not typing.get_args(tp):
        return {"float": "number", "int": "integer", "str": "string", "bool": "boolean"}.get(tp.__name__, tp.__name__)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is dict or origin is collections.abc.Mapping:
        return f"object {{{type_name(args[0])}: {type_name(args[1])}}}"
    if origin in (tuple, list, set, frozenset):
        return f"array of {type_name(args[0])}" if args else "array"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    return " | ".join(type_name(a) for a in args) if args else str(tp)


def main() -> None:
    for collector in registry():
        for spec in collector.sources:
            if spec.payload is None:
                continue
            sys.stdout.write(f"source {spec.name} (collector {collector.name}): {spec.payload.__name__}\n")
            sys.stdout.write("\n".join(describe(spec.payload, 1)) + "\n\n")


if __name__ == "__main__":
    main()
