"""Frames of stored JSON bodies read by Arrow's JSON reader: a long run's first load in C++.

Opening a run of 100k steps reads 300k timer rows and 100k step rows; even with orjson, a
Python loop over them takes seconds. ``pyarrow.json`` (pyarrow comes with Streamlit) parses
the bodies in one call into columns, given the record model's own schema for the fixed
fields; only the timer names (``values_ms``), which vary with the run, are inferred. The
result is handed to :func:`dsmon.model.frames.typed` like any other frame, so dtypes and
timestamps are what :func:`dsmon.model.frames.records_frame` gives. A kind with fields Arrow
cannot hold as columns (nested mappings, module trees) is left to the Python reader, and so
is any batch Arrow refuses (a value of another type than the model says).
"""

from __future__ import annotations

import io
import typing
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from dsmon.model.frames import field_dtypes, typed
from dsmon.model.records import KINDS
from dsmon.model.schema import Field, schema

_SCALARS: dict[Any, pa.DataType] = {
    float: pa.float64(),
    int: pa.int64(),
    str: pa.string(),
    bool: pa.bool_(),
}
_SOURCE = pa.struct(
    [("node", pa.string()), ("rank", pa.int64()), ("file", pa.string()), ("line", pa.int64())]
)
#: Field types read as lists (and handed on as tuples, as the record model holds them).
_LISTS: dict[Any, pa.DataType] = {
    tuple[float, ...]: pa.list_(pa.float64()),
    tuple[tuple[float, ...], ...]: pa.list_(pa.list_(pa.float64())),
}
_INT64 = {pa.int64(): pd.Int64Dtype()}
#: Schema metadata of :func:`arrow_table`: the mapping columns that are ``{}`` in every row.
_EMPTY_MAPPINGS = b"dsmon.empty_mappings"


def _arrow_type(field: Field) -> pa.DataType | None:
    """The Arrow type of a record field, None when it has no flat column form."""
    return _SCALARS.get(field.base) or _LISTS.get(field.base)


def _columns_of(kind: str) -> list[Field]:
    """The fields of ``kind`` that are frame columns, in the frame's order."""
    by_name = {f.name: f for f in schema(KINDS[kind]).fields}
    return [by_name[name] for name in field_dtypes(kind)]


class KindSchema(typing.NamedTuple):
    """How Arrow reads a kind: the explicit schema, and mapping fields left to inference."""

    schema: pa.Schema
    mappings: tuple[str, ...]  # read only when null everywhere (else the Python reader)


_SCHEMAS: dict[str, KindSchema | None] = {}


def arrow_schema(kind: str) -> KindSchema | None:
    """The explicit schema of a kind's bodies (timer names left out), or None if it has none."""
    if kind in _SCHEMAS:
        return _SCHEMAS[kind]
    fields = [("src", _SOURCE), ("ts", pa.timestamp("us")), ("step", pa.int64())]
    mappings: list[str] = []
    found: KindSchema | None = None
    for field in _columns_of(kind):
        arrow = _arrow_type(field)
        if arrow is not None:
            fields.append((field.name, arrow))
        elif field.is_mapping:
            mappings.append(field.name)
        else:
            break
    else:
        found = KindSchema(pa.schema(fields), tuple(mappings))
    _SCHEMAS[kind] = found
    return found


#: Bytes of JSON Arrow parses as one block. Blocks are parsed in parallel: one block of the
#: whole input (100 MB of timer lines at 100k steps) took 0.72 s, 4 MiB blocks 0.25 s on two
#: cores. Fields a block infers differently end in ArrowInvalid, and the Python reader then
#: reads the frame (:func:`dsmon.model.frames.bodies_frame`), so the frame never differs.
BLOCK_BYTES = 4 << 20


def arrow_frame(
    kind: str, ids: Sequence[int], bodies: Sequence[str | bytes]
) -> pd.DataFrame | None:
    """The frame of ``kind`` from its stored bodies, or None when Arrow cannot read them."""
    table = arrow_table(kind, ids, bodies)
    return None if table is None else table_frame(kind, table)


def arrow_table(kind: str, ids: Sequence[int], bodies: Sequence[str | bytes]) -> pa.Table | None:
    """The Arrow form of :func:`arrow_frame`, before pandas: what a store keeps of a page.

    Columns in the frame's order; list fields stay Arrow lists and mappings that are ``{}``
    in every row are null columns named in the schema metadata (:func:`table_frame` makes
    tuples and dicts of them), so the table survives Arrow IPC as it is.
    """
    found = arrow_schema(kind)
    if found is None or not bodies:
        return None
    data = b"\n".join([b if isinstance(b, bytes) else b.encode("utf-8") for b in bodies])
    options = pj.ParseOptions(explicit_schema=found.schema, unexpected_field_behavior="infer")
    try:
        table = pj.read_json(
            io.BytesIO(data), read_options=pj.ReadOptions(block_size=BLOCK_BYTES),
            parse_options=options,
        )  # fmt: skip
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    for name in found.mappings:  # a mapping with keys in some row: the Python reader's job
        if name in table.column_names and not _empty_mappings(table.column(name)):
            return None
    return _columns(kind, table, ids)


def table_frame(kind: str, table: pa.Table) -> pd.DataFrame:
    """The frame of a table from :func:`arrow_table`: dtypes and Python values as records give.

    Text is Python ``str`` or None (not NaN), list fields are tuples, empty mappings ``{}``.
    """
    order = table.column_names
    meta = (table.schema.metadata or {}).get(_EMPTY_MAPPINGS, b"").decode()
    listed = [f.name for f in _columns_of(kind) if f.base in _LISTS and f.name in order]
    tuples = {name: _tuples(table.column(name)) for name in listed}
    texts = {f.name: _objects(table.column(f.name)) for f in table.schema if _is_text(f.type)}
    table = table.drop_columns([*listed, *texts])
    frame = table.to_pandas(types_mapper=_INT64.get)
    index = frame.index
    columns: dict[str, Any] = dict(frame.items())
    for name, objects in texts.items():  # (a bare array of str would become pandas' str dtype)
        columns[name] = pd.Series(objects, index=index, dtype=object)
    empty = {}.fromkeys(filter(None, meta.split(",")))
    for name in empty:
        # one empty dict for all rows (nothing writes to a record's mapping): a dict per row
        # was 0.14 s of a 100k-step run's first page, for ZeRO timers' ``min_values_ms``
        columns[name] = pd.Series([{}] * len(index), index=index, dtype=object)
    for name, values in tuples.items():
        columns[name] = pd.Series(values, index=index, dtype=object)
    return typed({name: columns[name] for name in order}, field_dtypes(kind), index)


def _is_text(kind: pa.DataType) -> bool:
    """Text, or a column with no value at all (a field no row had): Python objects."""
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)
    )


def _objects(column: pa.ChunkedArray) -> np.ndarray:
    """A text column as Python ``str`` objects, None where null.

    Each distinct text is made once and shared (a run's node, file and timer group take a
    handful of values over a page of 50k rows): three times faster than pandas' string
    column turned into objects, and the page holds a few strings instead of 50k.
    """
    if pa.types.is_null(column.type):
        return np.full(len(column), None, dtype=object)
    encoded = pc.dictionary_encode(column.combine_chunks())
    texts = np.array([*encoded.dictionary.to_pylist(), None], dtype=object)
    return texts[encoded.indices.fill_null(len(encoded.dictionary)).to_numpy()]


def _empty_mappings(column: pa.ChunkedArray) -> bool:
    """Whether every value of an inferred mapping column is ``{}`` or null."""
    return column.null_count == len(column) or (
        pa.types.is_struct(column.type) and column.type.num_fields == 0
    )


def _columns(kind: str, table: pa.Table, ids: Sequence[int]) -> pa.Table:
    """BASE_COLUMNS, the kind's fields, then one ``<name>_ms`` column per timer name."""
    src = table.column("src").combine_chunks()
    cols: dict[str, Any] = {"id": pa.array(ids, pa.int64())}
    cols["step"], cols["ts"] = table.column("step"), table.column("ts")
    for key in ("node", "rank", "file", "line"):
        cols[key] = src.field(key)
    mappings: list[str] = []
    for name in field_dtypes(kind):
        if name not in table.column_names:
            cols[name] = pa.nulls(table.num_rows)
        elif pa.types.is_struct(table.column(name).type):
            mappings.append(name)  # {} in every row (see _empty_mappings)
            cols[name] = pa.nulls(table.num_rows)
        else:
            cols[name] = table.column(name)
    if "values_ms" in table.column_names:
        timers = table.column("values_ms").combine_chunks()
        if pa.types.is_struct(timers.type):
            for i in _first_seen_order(timers):
                cols[f"{timers.type.field(i).name}_ms"] = timers.field(i).cast(pa.float64())
    return pa.table(cols).replace_schema_metadata({_EMPTY_MAPPINGS: ",".join(mappings)})


def _first_seen_order(struct: pa.StructArray) -> list[int]:
    """The struct's fields in the order the rows first hold them, as the Python reader has it.

    Blocks parsed in parallel unite the fields each inferred in an order of their own.
    """
    first = [
        pc.index(struct.field(i).is_valid(), True).as_py() for i in range(struct.type.num_fields)
    ]
    return sorted(range(len(first)), key=lambda i: (first[i] if first[i] >= 0 else len(struct), i))


def _tuples(column: pa.ChunkedArray) -> list[Any]:
    """A list column's values as the record holds them: tuples of floats (of tuples).

    Without nulls, each level is cut from one flat list by its offsets, four times faster
    than a Python list per row (``lr`` and ``mom`` of 100k steps took 0.24 s of a first load).
    """
    array = column.combine_chunks()
    if array.null_count == 0 and _no_nulls_below(array):
        return _cut(array)
    nested = pa.types.is_list(column.type.value_type)
    return [
        None if v is None else tuple(map(tuple, v)) if nested else tuple(v)
        for v in column.to_pylist()
    ]


def _no_nulls_below(array: pa.Array) -> bool:
    """Whether no list inside ``array`` and no value at the bottom is null."""
    inner = array.flatten()
    if inner.null_count:
        return False
    return _no_nulls_below(inner) if pa.types.is_list(inner.type) else True


def _cut(array: pa.Array) -> list[tuple[Any, ...]]:
    """A null-free list array as tuples, level by level, from its offsets."""
    inner = array.flatten()
    items = _cut(inner) if pa.types.is_list(inner.type) else inner.to_pylist()
    offsets = array.offsets.to_numpy()
    widths = np.diff(offsets)
    if len(widths) and (widths == widths[0]).all():  # one length (a run's param groups)
        width = int(widths[0])
        if not width:
            return [()] * len(array)
        return list(zip(*[items[i::width] for i in range(width)], strict=True))
    bounds = (offsets - offsets[0]).tolist()
    return [tuple(items[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def release_unused() -> None:
    """Hand the memory Arrow's allocator keeps after a burst of parsing back to the system.

    Arrow allocates from a pool of its own (mimalloc), which keeps what it freed for its
    next allocation; pandas and numpy allocate elsewhere and cannot reuse it. After a 500 MB
    import kept its sealed pages the pool held 80 MiB, and 28 MiB more after the run's state
    read its timers' pages, under the run summary's arrays. A few milliseconds, so it is
    asked after reads of many pages, not after each one.
    """
    pa.default_memory_pool().release_unused()
