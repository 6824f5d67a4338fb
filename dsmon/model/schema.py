"""The record model's field types, read once per class: what every consumer of them asks.

The record dataclasses declare each field's type; the JSON codec (:mod:`dsmon.model.wire`)
must rebuild tuples and nested dataclasses from JSON lists, the checker
(:mod:`dsmon.model.check`) must test each value against its type and explain a mismatch, and
the frames (:mod:`dsmon.model.frames`, :mod:`dsmon.model.arrow_frames`) must give each column
its pandas (or Arrow) type. All of them read the answer here, from one :class:`Schema` per
class, so they cannot drift apart: a field added to the model is checked, decoded and typed
alike.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

#: A fast yes/no test of one value against a field's type.
Check = Callable[[Any], bool]
#: Rebuilds a field's value from the JSON list that stands for it.
Decode = Callable[[Any], Any]

#: Integers the store's BIGINT columns and pandas' Int64 frames can hold.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The largest step a record may name: the largest integer a browser's JavaScript number (an
#: IEEE double) holds exactly. A step past it could not be shown: the dashboard's step
#: slider refuses such bounds (Streamlit's ``StreamlitJSNumberBoundsError``) on every page
#: of the run. DeepSpeed numbers steps from 1; 0 is its step before the first.
MAX_STEP = 2**53 - 1
#: The longest duration a record may hold, in seconds: a week. No step of a training job,
#: nor any part of one, lasts that long; a value past it (``1e308`` ms) is a broken sender.
MAX_DURATION_S = 7 * 24 * 3600
#: Ceilings of duration fields by the unit their name ends with (``values_ms``, ``tuning_duration_s``).
_DURATION_UNITS = {"_ms": MAX_DURATION_S * 1000, "_s": MAX_DURATION_S}


#: The range of a float inside a mapping or a list (``losses``, ``lr``): any finite number.
#: JSON has no NaN or infinity: the codec writes them as null, which such a place cannot
#: hold (a single float field can: its null is a gap).
FINITE = (-sys.float_info.max, sys.float_info.max)


def bounds_of(name: str) -> tuple[float, float] | None:
    """The closed range a numeric field's values must lie in, by the field's name; None: any.

    ``step`` is 0 to :data:`MAX_STEP`; a duration (a name ending in ``_ms`` or ``_s``, but not
    a rate's ``_per_s``) is 0 to :data:`MAX_DURATION_S` in its unit, and finite. A mapping's
    values (``values_ms``) are held to the same range.
    """
    if name == "step":
        return 0, MAX_STEP
    if name.endswith("_per_s"):
        return None
    for suffix, ceiling in _DURATION_UNITS.items():
        if name.endswith(suffix):
            return 0, ceiling
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One field of a record class, with everything its type means to dsmon.

    ``base`` is the annotation without ``| None``; ``inline`` is the type test as a Python
    expression on ``v`` (``type(v) is str``) when the type is a plain class or a union of
    them, for the generated per-class checker; ``decode`` is None when JSON already gives the
    value as the field holds it. ``bounds`` is the closed range of its numbers
    (:func:`bounds_of`), part of ``check`` and ``inline``.
    """

    name: str
    annotation: Any
    base: Any
    required: bool
    is_mapping: bool
    dtype: str
    check: Check
    inline: str | None
    decode: Decode | None
    bounds: tuple[float, float] | None = None

    def explain(self, value: Any, prefix: str = "") -> str | None:
        """Why ``value`` does not fit this field (naming the deepest part at fault), or None."""
        name = prefix + self.name
        return _mismatch(value, self.annotation, name) or _out_of_bounds(value, self.bounds, name)


@dataclasses.dataclass(frozen=True, slots=True)
class Schema:
    """The fields of one record class, in declaration order, and lookups derived from them."""

    cls: type
    fields: tuple[Field, ...]
    names: tuple[str, ...]
    name_set: frozenset[str]
    required: tuple[str, ...]
    #: Field name -> decoder, for the fields whose JSON value must be rebuilt.
    decoders: Mapping[str, Decode]


_SCHEMAS: dict[type, Schema] = {}
_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names in order, computed once per class (encoding is a hot path)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def schema(cls: type) -> Schema:
    """The :class:`Schema` of record dataclass ``cls``, built on first use."""
    found = _SCHEMAS.get(cls)
    if found is None:
        found = _SCHEMAS[cls] = _build(cls)
    return found


def _build(cls: type) -> Schema:
    # Annotations are strings under postponed evaluation: resolve them once, here.
    hints = typing.get_type_hints(cls)
    fields = tuple(_field(f.name, hints[f.name], _is_required(f)) for f in dataclasses.fields(cls))
    return Schema(
        cls=cls,
        fields=fields,
        names=field_names(cls),
        name_set=frozenset(field_names(cls)),
        required=tuple(f.name for f in fields if f.required),
        decoders={f.name: f.decode for f in fields if f.decode is not None},
    )


def _is_required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _field(name: str, tp: Any, required: bool) -> Field:
    base = _without_none(tp)
    is_mapping = typing.get_origin(base) in (Mapping, dict)
    holds = _numbers_held(base)
    bounds = bounds_of(name) if holds is not None else None
    if bounds is None and holds in ("mapping", "tuple") and _item_type(base) is float:
        bounds = FINITE
    check, inline = _predicate(tp), _inline(tp)
    if bounds is not None:
        check, inline = _bounded(check, bounds, holds), _bounded_inline(base, bounds)
    return Field(
        name=name,
        annotation=tp,
        base=base,
        required=required,
        is_mapping=is_mapping,
        dtype=_dtype(base),
        check=check,
        inline=inline,
        decode=_decoder(base),
        bounds=bounds,
    )


def _item_type(base: Any) -> Any:
    """The type of a mapping's values or a ``tuple[X, ...]``'s items; ``base`` otherwise."""
    origin, args = typing.get_origin(base), typing.get_args(base)
    if origin in (Mapping, dict):
        return (args or (Any, Any))[1]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return base


def _numbers_held(base: Any) -> str | None:
    """How a field holds numbers: ``scalar``, ``mapping`` (``values_ms``), ``tuple`` (``lr``).

    None when it holds none.
    """
    if _item_type(base) not in (int, float):
        return None
    if typing.get_origin(base) in (Mapping, dict):
        return "mapping"
    return "tuple" if typing.get_origin(base) is tuple else "scalar"


def _bounded(check: Check, bounds: tuple[float, float], holds: str | None) -> Check:
    """``check``, and every number within ``bounds`` (NaN is not: it compares false)."""
    low, high = bounds
    if holds == "mapping":
        return lambda v: check(v) and (v is None or all(low <= x <= high for x in v.values()))
    if holds == "tuple":
        return lambda v: check(v) and (v is None or all(low <= x <= high for x in v))
    return lambda v: check(v) and (v is None or low <= v <= high)


def _bounded_inline(base: Any, bounds: tuple[float, float]) -> str | None:
    """The inline check of a bounded number field (``step`` is on every record)."""
    if base not in _INLINE:
        return None  # a mapping: its predicate checks the values
    return f"v is None or (({_INLINE[base]}) and {bounds[0]} <= v <= {bounds[1]})"


def _without_none(tp: Any) -> Any:
    """``X`` of ``X | None``; any other annotation as it is."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return tp


# --- pandas dtypes ---------------------------------------------------------------------------

#: Column dtypes by field class: nullable integers and booleans, so a missing value stays NA
#: and never turns into 0, False or a float.
_DTYPES: dict[Any, str] = {bool: "boolean", int: "Int64", float: "float64"}


def _dtype(base: Any) -> str:
    """The pandas dtype of a field of type ``base``; mappings, tuples, text are objects."""
    return _DTYPES.get(base, "object")


# --- JSON lists back into tuples and nested records -------------------------------------------


def _decoder(tp: Any) -> Decode | None:
    """How to rebuild a value of ``tp`` from JSON, or None when JSON gives it as it is."""
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        item = _item_decoder(args[0]) if len(args) == 2 and args[1] is Ellipsis else None
        if item is None:
            return tuple
        return lambda value: tuple(map(item, value))  # map: no Python frame per item
    return None


def _item_decoder(tp: Any) -> Decode | None:
    if tp is float:
        return float
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        cls: Any = tp
        return lambda value: cls(**value)
    return _decoder(tp)


# --- type predicates: a batch of 60,000 records must not spend seconds on reflection ----------


def _always(value: Any) -> bool:
    return True


_EXACT: dict[Any, Check] = {
    type(None): lambda v: v is None,
    # JSON writes 2.0 as 2.0 but many senders write 2: an int is a valid float (a bool is not).
    float: lambda v: type(v) is float or type(v) is int,
    # Wider integers break the store's BIGINT columns and pandas' Int64 frames.
    int: lambda v: type(v) is int and INT64_MIN <= v <= INT64_MAX,
    str: lambda v: type(v) is str,
    bool: lambda v: type(v) is bool,
}


def _predicate(tp: Any) -> Check:
    """A fast yes/no check for annotation ``tp``: the shapes record fields use."""
    if tp is Any:
        return _always
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return _union_predicate(args)
    if origin is Mapping or origin is dict:
        key_ok, value_ok = (_predicate(a) for a in (args or (Any, Any)))
        return lambda v: (
            (type(v) is dict or isinstance(v, Mapping))
            and all(key_ok(k) and value_ok(x) for k, x in v.items())
        )
    if origin is tuple:
        return _tuple_predicate(args)
    if tp in _EXACT:
        return _EXACT[tp]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        nested = schema(tp).fields
        return lambda v: isinstance(v, tp) and all(f.check(getattr(v, f.name)) for f in nested)
    return lambda v: isinstance(v, tp)


#: Annotations checked by the value's exact class alone (float takes a JSON integer too).
_BY_CLASS: dict[Any, tuple[type, ...]] = {
    type(None): (type(None),), str: (str,), bool: (bool,), float: (float, int)
}  # fmt: skip


def _union_predicate(args: tuple[Any, ...]) -> Check:
    """``X | None`` and the like: one set lookup when every member is a plain class.

    Most record fields are such unions, and a batch checks hundreds of thousands of them.
    """
    if all(a in _BY_CLASS or a is int for a in args):
        allowed = frozenset(c for a in args if a in _BY_CLASS for c in _BY_CLASS[a])
        if int in args and int not in allowed:
            return lambda v: type(v) in allowed or (type(v) is int and INT64_MIN <= v <= INT64_MAX)
        return lambda v: type(v) in allowed
    checks = tuple(_predicate(a) for a in args)
    return lambda v: any(check(v) for check in checks)


def _tuple_predicate(args: tuple[Any, ...]) -> Check:
    if len(args) == 2 and args[1] is Ellipsis:
        item_ok = _predicate(args[0])
        return lambda v: isinstance(v, tuple | list) and all(item_ok(x) for x in v)
    checks = tuple(_predicate(a) for a in args)
    return lambda v: (
        isinstance(v, tuple | list)
        and len(v) == len(checks)
        and all(ok(x) for ok, x in zip(checks, v, strict=True))
    )


#: The same tests as :data:`_EXACT`, as source text for a generated checker; ``MIN`` and
#: ``MAX`` are :data:`INT64_MIN` and :data:`INT64_MAX` there.
_INLINE = {
    type(None): "v is None",
    str: "type(v) is str",
    bool: "type(v) is bool",
    float: "type(v) is float or type(v) is int",
    int: "(type(v) is int and MIN <= v <= MAX)",
}


def _inline(tp: Any) -> str | None:
    """The check of ``tp`` as a Python expression on ``v``; None when it needs a predicate."""
    if tp is Any:
        return "True"
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        parts = [_INLINE.get(a) for a in typing.get_args(tp)]
        return None if None in parts else " or ".join(str(p) for p in parts)
    return _INLINE.get(tp)


# --- explaining a mismatch ------------------------------------------------------------------


def _describe(tp: Any) -> str:
    """A readable type name for error messages (``int``, ``Mapping[str, float]``)."""
    if typing.get_origin(tp) is None and hasattr(tp, "__name__"):
        return str(tp.__name__)
    return str(tp).replace("typing.", "").replace("collections.abc.", "")


def _mismatch(value: Any, tp: Any, name: str) -> str | None:
    """Why ``value`` does not fit annotation ``tp`` (naming the deepest field), or None."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return None
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _mismatch(value, inner[0], name)
        if any(_mismatch(value, a, name) is None for a in inner):
            return None
    elif origin is not None:
        return _mismatch_generic(value, origin, typing.get_args(tp), name)
    elif _fits_plain(value, tp):
        if dataclasses.is_dataclass(tp):
            return _mismatch_nested(value, name)
        return _out_of_range(value, tp, name)
    return f"field {name!r}: expected {_describe(tp)}, got {type(value).__name__}"


def _fits_plain(value: Any, tp: Any) -> bool:
    if tp is type(None):
        return value is None
    if tp is float:
        # JSON writes 2.0 as 2.0 but many senders write 2: an int is a valid float.
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _out_of_bounds(value: Any, bounds: tuple[float, float] | None, name: str) -> str | None:
    """Why a value of the right type is out of its field's range (:func:`bounds_of`), or None."""
    if bounds is None or value is None:
        return None
    if isinstance(value, Mapping):
        items = [(f"{name}.{key}", number) for key, number in value.items()]
    elif isinstance(value, tuple | list):
        items = [(f"{name}[{i}]", number) for i, number in enumerate(value)]
    else:
        items = [(name, value)]
    low, high = bounds
    for where, number in items:
        if low <= number <= high:
            continue
        if bounds == FINITE:
            return f"field {where!r}: {number!r} is not a finite number"
        what = "a step" if name.endswith("step") else "a duration (at most a week)"
        return f"field {where!r}: {number!r} is out of range: {what} is {low} to {high}"
    return None


def _out_of_range(value: Any, tp: Any, name: str) -> str | None:
    if tp is int and type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        return f"field {name!r}: {value} does not fit in 64 bits"
    return None


def _mismatch_generic(value: Any, origin: Any, args: tuple[Any, ...], name: str) -> str | None:
    if origin is Mapping or origin is dict:
        if not isinstance(value, Mapping):
            return f"field {name!r}: expected an object, got {type(value).__name__}"
        key_tp, value_tp = args if args else (Any, Any)
        for key, item in value.items():
            problem = _mismatch(key, key_tp, f"{name} key") or _mismatch(
                item, value_tp, f"{name}.{key}"
            )
            if problem:
                return problem
        return None
    if origin is tuple:
        if not isinstance(value, tuple | list):
            return f"field {name!r}: expected an array, got {type(value).__name__}"
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        elif len(value) != len(args):
            return f"field {name!r}: expected {len(args)} items, got {len(value)}"
        for i, (item, item_tp) in enumerate(zip(value, args, strict=True)):
            problem = _mismatch(item, item_tp, f"{name}[{i}]")
            if problem:
                return problem
        return None
    return None if isinstance(value, origin) else f"field {name!r}: expected {origin.__name__}"


def _mismatch_nested(value: Any, name: str) -> str | None:
    """The first bad field of a nested dataclass (a flops-profile module row), if any."""
    for f in schema(type(value)).fields:
        problem = f.explain(getattr(value, f.name), f"{name}.")
        if problem:
            return problem
    return None
