"""The record model as msgspec types: a JSON line decoded and type-checked in compiled code.

The ingest server checks every line it receives (:mod:`dsmon.model.check`), and doing that in
Python, field by field, cost more per record than SQLite's own insert. msgspec (a kept,
compiled library) decodes a line straight into a typed ``Struct`` and checks it on the way.
The structs are generated from :func:`dsmon.model.schema.schema`, field for field: the same
names, the same required fields, no unknown field (in ``src`` and nested rows too), integers
within 64 bits, a float field taking a JSON integer, ``kind`` choosing the class. So every
line they accept, :func:`dsmon.model.check.parse_line` accepts too; they are a fast *yes*.

A line they refuse is not explained here: the caller checks it again with ``parse_line``,
whose message names the line's field at fault (and which takes the few lines it accepts that
these types do not, ``NaN`` say). The checks that are not about types (names too long to
index, NUL characters, times no calendar has, nesting depth) stay with the caller too.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import msgspec

from dsmon.model.records import Record
from dsmon.model.schema import INT64_MAX, INT64_MIN, schema

#: An integer the store's BIGINT columns hold.
_INT64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
#: Annotations that are the same type in msgspec (``float`` takes a JSON integer in both).
_SAME = (str, float, bool, type(None))


class UnsupportedTypeError(TypeError):
    """A field type with no exact msgspec counterpart: its kind is checked by ``parse_line``."""


def line_structs(classes: Iterable[type[Record]]) -> dict[type[msgspec.Struct], type[Record]]:
    """The struct of each record class that has one (tagged by its ``kind``), with the class.

    A class with a field type that has no exact counterpart is left out: the caller checks
    its lines the slow way.
    """
    out: dict[type[msgspec.Struct], type[Record]] = {}
    for cls in classes:
        try:
            out[struct_of(cls, tag=cls.KIND)] = cls
        except UnsupportedTypeError:
            continue
    return out


def decoder(structs: Iterable[type[msgspec.Struct]]) -> msgspec.json.Decoder[Any]:
    """A decoder of one JSON line into the struct its ``kind`` names, one of ``structs``."""
    return msgspec.json.Decoder(typing.Union[tuple(structs)])  # noqa: UP007 - built at run time


def nests_freely(cls: type) -> bool:
    """Whether a field of ``cls`` holds free-form JSON (``Any``), nested as deep as it likes.

    Other fields' types bound their nesting, so only lines of such classes need counting
    against :data:`dsmon.model.check.MAX_JSON_DEPTH`.
    """
    return any(_holds_any(f.annotation) for f in schema(cls).fields)


def _holds_any(tp: Any) -> bool:
    if tp is Any:
        return True
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return nests_freely(tp)
    return any(_holds_any(a) for a in typing.get_args(tp) if a is not Ellipsis)


_STRUCTS: dict[tuple[type, str | None], type[msgspec.Struct]] = {}


def struct_of(cls: type, tag: str | None = None) -> type[msgspec.Struct]:
    """The msgspec struct mirroring dataclass ``cls`` (tagged by ``kind`` = ``tag`` if given).

    Raises:
        UnsupportedTypeError: a field's type has no exact msgspec counterpart.
    """
    found = _STRUCTS.get((cls, tag))
    if found is not None:
        return found
    fields: list[tuple[str, Any, Any]] = []
    for f, dc_field in zip(schema(cls).fields, dataclasses.fields(cls), strict=True):
        if dc_field.default is not dataclasses.MISSING:
            default: Any = dc_field.default
        elif dc_field.default_factory is not dataclasses.MISSING:
            default = msgspec.field(default_factory=dc_field.default_factory)
        else:
            default = msgspec.NODEFAULT
        fields.append((f.name, _type_of(f.annotation, f.bounds), default))
    options: dict[str, Any] = {"tag_field": "kind", "tag": tag} if tag is not None else {}
    made = msgspec.defstruct(
        f"{cls.__name__}Line",
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        module=__name__,
        gc=False,
        **options,
    )
    _STRUCTS[(cls, tag)] = made
    return made


def _type_of(tp: Any, bounds: tuple[float, float] | None = None) -> Any:
    """The msgspec type accepting exactly the JSON values :mod:`dsmon.model.check` accepts.

    ``bounds``: the closed range of the field's numbers (``dsmon.model.schema.bounds_of``).
    A free-form value (``Any``: a config's, an event's detail) is kept as its raw JSON: msgspec
    still reads it through, refusing what its full decode refuses (bad syntax, a control
    character or lone surrogate in a string, nesting past the recursion limit) bar a number out
    of a float's range, which ``parse_line`` takes too, and the bytes of a string, which the
    caller decodes with the whole line; but it builds no dict or list of it that nothing reads
    (the ingest server stores the line as it came). A config line's nested dicts were a tenth
    of the server's decoding.
    """
    if tp is Any:
        return msgspec.Raw
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        members = tuple(_type_of(a, bounds) for a in args)
        return typing.Union[members]  # noqa: UP007 - built at run time
    if origin in (Mapping, dict):
        key, value = args or (Any, Any)
        return dict[_type_of(key), _type_of(value, bounds)]  # type: ignore[misc]
    if bounds is not None and tp in (int, float):
        return Annotated[tp, msgspec.Meta(ge=bounds[0], le=bounds[1])]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple[_type_of(args[0], bounds), ...]  # type: ignore[misc]
        return tuple[tuple(_type_of(a) for a in args)]  # type: ignore[misc]
    if tp is int:
        return _INT64
    if tp in _SAME:
        return tp
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return struct_of(tp)
    raise UnsupportedTypeError(f"no msgspec type for {tp!r}")
