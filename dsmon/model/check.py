"""One JSON line to one checked record: the record model's types, enforced.

``wire.decode`` builds dataclasses, which do not check types, and a ``"step": "abc"`` that
reached the store would break every chart and query later. Lines from the network (the
ingest server) and from files (``dsmon import`` of records) go through :func:`parse_line`:
JSON nested at most :data:`MAX_JSON_DEPTH` deep, required fields present, every field of the
type the record model declares, names short enough to index, times that exist.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from dsmon.model.records import KINDS, Record
from dsmon.model.units import parse_ts
from dsmon.model.wire import EncodedRecord, WireError, encode, from_dict

#: Longest run or node name in UTF-8 bytes: both go into one index entry of the store.
MAX_NAME_BYTES = 1024
#: Deepest JSON nesting of a line; records nest a few levels, Python's parser ~1000.
MAX_JSON_DEPTH = 64


def encoded_record(rec: Record, line: str) -> EncodedRecord:
    """``rec`` with the line to store for it: ``line`` as it came, if it is strict JSON.

    ``line`` must be the one ``rec`` was just decoded and checked from; a line holding a
    ``NaN``/``Infinity`` constant is encoded again, so stored bodies stay strict JSON.
    """
    constant = ("NaN" in line or "Infinity" in line) and JSON_CONSTANT.search(line)
    return EncodedRecord(rec, encode(rec) if constant else line.strip())


def parse_line(line: str) -> Record:
    """One JSON line as a checked record; :class:`WireError` names the field at fault."""
    obj = _loads(line)
    if obj is None or line.count("[") + line.count("{") > MAX_JSON_DEPTH:
        _check_depth(obj, line)
    if isinstance(obj, dict):
        _check_required(obj)
    if "\\u" in line and _SURROGATE.search(line):  # substring first: most lines have none
        _check_unicode(obj)
    rec = from_dict(obj)
    check_record(rec)
    return rec


def _loads(line: str) -> Any:
    """The line's JSON: orjson (compiled) for the usual line, Python's decoder otherwise.

    orjson refuses what Python's decoder takes (``NaN``, integers past 64 bits, lone
    surrogates) and stops at its own depth limit; such a line goes through the standard
    decoder, whose answer and error messages the checks below were written for.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise WireError(f"not JSON: {exc}") from None
    except RecursionError:
        return None  # deeper than the parser goes: refused by the depth check


def _check_depth(obj: Any, line: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH`.

    No record nests more than a few levels; a deeper line is an attack or a bug, and left
    alone it would reach Python's recursion limit in the encoder, the store or a page.
    """
    if obj is None and line.strip() != "null":
        raise WireError(f"not JSON: nested more than {MAX_JSON_DEPTH} levels deep")
    level, todo = 0, [obj]
    while todo and level <= MAX_JSON_DEPTH:
        level += 1
        todo = [
            v
            for item in todo
            if isinstance(item, dict | list)
            for v in (item.values() if isinstance(item, dict) else item)
        ]
    if todo:
        raise WireError(f"not JSON: nested more than {MAX_JSON_DEPTH} levels deep")


#: JSON constants Python's decoder accepts but strict JSON does not (or a string holding them).
JSON_CONSTANT = re.compile(r"NaN|Infinity")


# A \uD800-\uDFFF escape: legal in a pair (an emoji sent as ASCII), poison alone.
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _check_unicode(obj: Any) -> None:
    """Refuse a lone surrogate: no database can store it, so the batch would fail forever."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
        raise WireError(f"not valid Unicode: lone surrogate {bad}") from None


def check_record(rec: Record) -> None:
    """Raise :class:`WireError` naming the first field whose value does not fit its type."""
    _check_fields(rec.src, "src.")
    src = rec.src
    if not src.run:
        raise WireError("field 'src.run': must not be empty")
    _check_fields(rec)
    # These are stored in text columns, and PostgreSQL text cannot hold NUL (no real run,
    # host, path or timestamp contains one; elsewhere JSON escapes it).
    for name, value in (
        ("src.run", src.run),
        ("src.node", src.node),
        ("src.file", src.file),
        ("ts", rec.ts),
    ):
        if value is not None and "\x00" in value:
            raise WireError(f"field {name!r}: contains a NUL character")
    for name, value in (("src.run", src.run), ("src.node", src.node)):
        if value is not None and len(value) > MAX_NAME_BYTES // 4:
            _check_name_length(name, value)
    if rec.ts is not None:
        _check_ts(rec.ts)


def _check_name_length(name: str, value: str) -> None:
    """Refuse a run or node name too long to index (PostgreSQL's B-tree takes ~2.7 kB a row).

    The database would refuse the batch at every retry; refusing it here says why, once.
    """
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise WireError(f"field {name!r}: {size} bytes long, at most {MAX_NAME_BYTES}")


def _check_ts(ts: str) -> None:
    """Refuse a time that names no real moment (``2026-19-39T25:61:00``).

    Stored, it would be sorted as if it were one, and every time axis of the run would go wrong.
    """
    if parse_ts(ts) is None:
        raise WireError(f"field 'ts': not an ISO-8601 date and time: {ts[:40]!r}")


def _check_fields(obj: Any, prefix: str = "") -> None:
    """Check every field at once with the class's checker; explain only a failure."""
    bad = _checker(type(obj))(obj)
    if bad is not None:
        for name, ok, tp in _plan(type(obj)):
            value = getattr(obj, name)
            if name == bad or not ok(value):
                raise WireError(_mismatch(value, tp, prefix + name) or f"field {prefix + name!r}")


def _check_required(obj: dict[str, Any]) -> None:
    """Name a missing required field; the dataclass's own TypeError is less direct."""
    kind = obj.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return  # from_dict reports the unknown kind
    for name in _required(cls):
        if name not in obj:
            raise WireError(f"field {name!r}: required by kind {cls.KIND!r} but missing")


# --- compiled checks: a batch of 60,000 records must not spend seconds on reflection ---------

Check = Callable[[Any], bool]
_PLANS: dict[type, tuple[tuple[str, Check, Any], ...]] = {}
_REQUIRED: dict[type, tuple[str, ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, Check, Any], ...]:
    """``(field, predicate, annotation)`` for each field of ``cls`` but ``src``, built once."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "src"]
        plan = _PLANS[cls] = tuple((n, _predicate(hints[n]), hints[n]) for n in fields)
    return plan


_CHECKERS: dict[type, Callable[[Any], str | None]] = {}


def _checker(cls: type) -> Callable[[Any], str | None]:
    """One generated function that checks every field of ``cls``: the first bad name, or None.

    The same technique ``dataclasses`` uses for ``__init__``: a field whose annotation is a
    plain class or a union of them becomes an inline ``type(v) is ...`` test, others call
    their predicate. A call per field per record was most of a batch's checking time.
    """
    check = _CHECKERS.get(cls)
    if check is not None:
        return check
    env: dict[str, Any] = {"MIN": _INT64_MIN, "MAX": _INT64_MAX}
    lines = ["def check(obj):"]
    for i, (name, ok, tp) in enumerate(_plan(cls)):
        test = _inline(tp)
        if test is None:
            env[f"_p{i}"] = ok
            test = f"_p{i}(v)"
        lines += [f"    v = obj.{name}", f"    if not ({test}):", f"        return {name!r}"]
    lines.append("    return None")
    exec("\n".join(lines), env)  # noqa: S102 - source built above from field names only
    check = _CHECKERS[cls] = env["check"]
    return check


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


def _required(cls: type) -> tuple[str, ...]:
    names = _REQUIRED.get(cls)
    if names is None:
        names = _REQUIRED[cls] = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
    return names


def _always(value: Any) -> bool:
    return True


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EXACT: dict[Any, Check] = {
    type(None): lambda v: v is None,
    # JSON writes 2.0 as 2.0 but many senders write 2: an int is a valid float (a bool is not).
    float: lambda v: type(v) is float or type(v) is int,
    # Wider integers break the store's BIGINT columns and pandas' Int64 frames.
    int: lambda v: type(v) is int and _INT64_MIN <= v <= _INT64_MAX,
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
        plan = _plan(tp)
        return lambda v: isinstance(v, tp) and all(ok(getattr(v, n)) for n, ok, _ in plan)
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
            return lambda v: (
                type(v) in allowed or (type(v) is int and _INT64_MIN <= v <= _INT64_MAX)
            )
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


# --- explaining a failure ------------------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    """Resolved annotations of a record class (they are strings under postponed evaluation)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


_HINTS: dict[type, dict[str, Any]] = {}


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


def _out_of_range(value: Any, tp: Any, name: str) -> str | None:
    if tp is int and type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
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
    hints = _hints(type(value))
    for f in dataclasses.fields(value):
        problem = _mismatch(getattr(value, f.name), hints[f.name], f"{name}.{f.name}")
        if problem:
            return problem
    return None
