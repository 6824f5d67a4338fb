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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from dsmon.model.records import KINDS, Record, Source
from dsmon.model.schema import INT64_MAX, INT64_MIN, Field, schema
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
    obj = loads(line)
    if obj is None or line.count("[") + line.count("{") > MAX_JSON_DEPTH:
        _check_depth(obj, line)
    if isinstance(obj, dict):
        _check_required(obj)
    if "\\u" in line and _SURROGATE.search(line):  # substring first: most lines have none
        _check_unicode(obj)
    rec = from_dict(obj)
    check_record(rec)
    return rec


def loads(line: str | bytes) -> Any:
    """The line's JSON: msgspec (compiled) for the usual line, Python's decoder otherwise.

    msgspec, not orjson: orjson turns an integer past 64 bits into a float without a word,
    so ``"step": 18446744073709551616`` would be refused as "expected int, got float" and a
    big integer in ``detail`` would reach the record rounded. msgspec gives exact integers.
    It refuses what Python's decoder takes (``NaN``, ``1e400``, lone surrogates) and stops
    at the recursion limit; such a line goes through the standard decoder, whose answer and
    error messages the checks below were written for.
    """
    try:
        return msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):  # ValidationError (1e400) is a DecodeError
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
        for f in _checked_fields(type(obj)):
            value = getattr(obj, f.name)
            if f.name == bad or not f.check(value):
                raise WireError(f.explain(value, prefix) or f"field {prefix + f.name!r}")


def _check_required(obj: dict[str, Any]) -> None:
    """Name a missing required field; the dataclass's own TypeError is less direct."""
    kind = obj.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return  # from_dict reports the unknown kind
    for name in schema(cls).required:
        if name not in obj:
            raise WireError(f"field {name!r}: required by kind {cls.KIND!r} but missing")


def _checked_fields(cls: type) -> tuple[Field, ...]:
    """The fields of ``cls`` checked by type: all but ``src``, which is checked on its own."""
    return tuple(f for f in schema(cls).fields if f.name != "src")


# --- compiled checks: a batch of 60,000 records must not spend seconds on reflection ---------

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
    env: dict[str, Any] = {"MIN": INT64_MIN, "MAX": INT64_MAX}
    lines = ["def check(obj):"]
    for i, f in enumerate(_checked_fields(cls)):
        test = f.inline
        if test is None:
            env[f"_p{i}"] = f.check
            test = f"_p{i}(v)"
        lines += [f"    v = obj.{f.name}", f"    if not ({test}):", f"        return {f.name!r}"]
    lines.append("    return None")
    exec("\n".join(lines), env)  # noqa: S102 - source built above from field names only
    check = _CHECKERS[cls] = env["check"]
    return check


# --- a parser's record made to fit what the store and the ingest server take ----------------


def fit(rec: Record) -> tuple[Record | None, list[str]]:
    """``rec`` as the store and the ingest server take it, and what had to be left out.

    A parser reads what a log prints, and a log may print what no record can hold: a step
    past :data:`~dsmon.model.schema.MAX_STEP` (``step=9007199254740993``), a timer gone
    negative or a latency of ``1.8 Gs`` (DeepSpeed printed both), a count past 64 bits. Such a
    value is left out, a gap where the record allows one (``None``, a mapping without that
    entry), and named in the list, so the caller counts it; the rest of the record is kept.
    None when the record cannot be made to fit (a required field at fault). Every record a
    parser hands on passes through here, so ``dsmon import`` stores what a collector's
    server would have accepted, and no batch is refused for one value.
    """
    if _checker(type(rec))(rec) is None and _checker(Source)(rec.src) is None:
        return rec, []  # the usual record: one compiled check
    problems: list[str] = []
    src = _fitted(rec.src, "src.", problems)
    fitted = _fitted(rec, "", problems, src) if src is not None else None
    return fitted, problems


def fit_all(records: Iterable[Record]) -> tuple[list[Record], list[str]]:
    """:func:`fit` for each record: those kept, and every problem of all of them."""
    kept: list[Record] = []
    problems: list[str] = []
    for rec in records:
        fitted, found = fit(rec)
        problems += found
        if fitted is not None:
            kept.append(fitted)
    return kept, problems


def _fitted(obj: Any, prefix: str, problems: list[str], src: Any = None) -> Any:
    """A dataclass with each field that does not fit left out (or fitted inside); or None."""
    changes: dict[str, Any] = {} if src is None or src is obj.src else {"src": src}
    for f in schema(type(obj)).fields:
        if f.name == "src" and src is not None:
            continue
        value = getattr(obj, f.name)
        if f.check(value):
            continue
        problems.append(f.explain(value, prefix) or f"field {prefix + f.name!r}")
        value = _fitted_value(value, f, prefix, problems)
        if value is _UNFIT:
            if f.required:
                return None
            value = _default(type(obj), f.name)
        changes[f.name] = value
    return dataclasses.replace(obj, **changes) if changes else obj


_UNFIT = object()


def _fitted_value(value: Any, f: Field, prefix: str, problems: list[str]) -> Any:
    """What of a field's value fits: a mapping's good entries, a tuple's fitted rows."""
    if f.is_mapping and isinstance(value, Mapping):
        kept = {k: v for k, v in value.items() if f.check({k: v})}
        return kept if kept or not f.required else _UNFIT
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        rows = [_fitted(row, f"{prefix}{f.name}[{i}].", []) for i, row in enumerate(value)]
        rows_kept = tuple(r for r in rows if r is not None)
        return rows_kept if f.check(rows_kept) else _UNFIT
    return _UNFIT  # a list of numbers is left out whole: its items name places (lr per group)


def _default(cls: type, name: str) -> Any:
    """The value a record field takes when it is not given (``None``, ``()``, ``{}``)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default
