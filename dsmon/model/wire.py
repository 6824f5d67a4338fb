"""The JSON-lines form of records: one codec for ``dsmon parse``, the spool and the ingest API.

A record becomes one JSON object: ``{"kind": ..., "src": {...}, "ts": ..., "step": ..., <fields>}``.
``decode`` is strict: an unknown kind, a missing required field or a field of the wrong shape
raises :class:`WireError` naming the field, so the ingest server can answer 400 with a reason.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from dsmon.model.records import KINDS, Record, Source
from dsmon.model.schema import field_names, schema


class WireError(ValueError):
    """A JSON object that is not a valid record; the message names the offending field."""


_PLAIN = frozenset({str, int, bool, type(None)})


def json_value(value: Any) -> Any:
    """A field's value as the record's JSON holds it: JSON has no inf/nan, they become null.

    Stores that keep a record's numbers in columns of their own use it too
    (``dsmon.store.gpu.rows``), so a record reads back as its JSON form has it.

    Dispatches on the exact class first: encoding runs once per record of a 500 MB log, and
    most values are plain strings, ints and finite floats.
    """
    cls = value.__class__
    if cls in _PLAIN:
        return value
    if cls is float:
        return value if value - value == 0.0 else None  # inf - inf and nan - nan are nan
    if cls is dict:
        return {k if k.__class__ is str else str(k): json_value(v) for k, v in value.items()}
    if cls is tuple or cls is list:
        return [json_value(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: json_value(getattr(value, name)) for name in field_names(cls)}
    if isinstance(value, float):
        return json_value(float(value))
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def to_dict(rec: Record) -> dict[str, Any]:
    """The record as a plain JSON-ready dict, ``kind`` first."""
    out: dict[str, Any] = {"kind": rec.KIND}
    for name in field_names(type(rec)):
        out[name] = json_value(getattr(rec, name))
    return out


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_KIND_HEADS: dict[str, bytes] = {}


def encode(rec: Record) -> str:
    """One line of JSON (no newline)."""
    return encode_bytes(rec).decode("utf-8")


def encode_bytes(rec: Record) -> bytes:
    """One line of JSON as UTF-8 (no newline): what ``dsmon parse`` writes for each record.

    orjson (compiled) writes a dataclass's fields in order, nested dataclasses and tuples
    included, and inf/nan as null, as :func:`to_dict` does, five times faster than building
    the dict and encoding it with ``json``; only ``kind`` is put in front of its object.
    The two differ in one respect: a float is written in the shortest form that reads back
    the same, ``0.00001`` where ``json`` writes ``1e-05`` (the same number). A record orjson
    refuses (an int beyond 64 bits, a dict with non-string keys) takes the ``json`` path.
    """
    head = _KIND_HEADS.get(rec.KIND)
    if head is None:
        head = _KIND_HEADS[rec.KIND] = b'{"kind":' + orjson.dumps(rec.KIND) + b","
    try:
        body = orjson.dumps(rec)
    except TypeError:  # orjson.JSONEncodeError: a value it does not write
        return _ENCODER.encode(to_dict(rec)).encode("utf-8")
    return head + body[1:]


def _source(value: Any) -> Source:
    if not isinstance(value, Mapping):
        raise WireError("field 'src': expected an object")
    try:
        return Source(**value)
    except TypeError as exc:
        raise WireError(f"field 'src': {exc}") from None


def from_dict(obj: Mapping[str, Any]) -> Record:
    """Build a record from its dict form; raises :class:`WireError` on any bad field."""
    if not isinstance(obj, Mapping):
        raise WireError("record: expected a JSON object")
    kind = obj.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise WireError(f"field 'kind': unknown record kind {kind!r}")
    shape = schema(cls)
    names, decoders = shape.name_set, shape.decoders
    kwargs: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "kind":
            continue
        if key not in names:
            raise WireError(f"field {key!r}: not a field of kind {kind!r}")
        if key == "src":
            kwargs[key] = _source(value)
        elif key in decoders and value is not None:
            try:
                kwargs[key] = decoders[key](value)
            except (TypeError, ValueError) as exc:
                raise WireError(f"field {key!r}: {exc}") from None
        else:
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise WireError(f"kind {kind!r}: {exc}") from None


def decode(line: str) -> Record:
    """Parse one JSON line into a record."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WireError(f"not JSON: {exc}") from None
    return from_dict(obj)


class EncodedRecord(NamedTuple):
    """A record with its JSON line already at hand (the ingest server received it so).

    Storing the received line saves encoding the record again, the costliest step of ingest
    after decoding; the line must decode to ``record`` (the server checked that it does).
    """

    record: Record
    body: str
