from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from lanes import first_fast

from dsmon.model.arrow_frames import _tuples
from dsmon.model.frames import BASE_COLUMNS, bodies_frame, field_dtypes, records_frame
from dsmon.model.records import (
    EventRecord,
    Record,
    Source,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)


def _timer(line: int, group: str, values: dict[str, float], rank: int | None = 0) -> TimerRecord:
    return TimerRecord(
        src=Source(run="r", file="train.log", line=line, offset=line * 10, rank=rank),
        ts=None if line == 3 else f"2026-11-29T14:11:0{line}.250",
        step=line,
        group=group,
        values_ms=values,
    )


def test_timer_values_become_columns_in_order_of_first_appearance() -> None:
    recs = [
        _timer(1, "zero_optimizer", {"optimizer_allgather": 11.76, "optimizer_step": 77.51}),
        _timer(2, "global", {"fwd": 350.75, "step": 190.22}),
    ]
    f = records_frame("timer", recs, [7, 8])
    assert list(f.columns) == [
        *BASE_COLUMNS,
        "group",
        "micro_step",
        "legacy",
        "min_values_ms",
        "optimizer_allgather_ms",
        "optimizer_step_ms",
        "fwd_ms",
        "step_ms",
    ]
    assert f["id"].tolist() == [7, 8]
    assert f["optimizer_allgather_ms"].iloc[0] == 11.76
    assert pd.isna(f["optimizer_allgather_ms"].iloc[1])
    assert f["fwd_ms"].iloc[1] == 350.75
    assert "values_ms" not in f.columns  # widened above, not kept twice
    assert f["ts"].tolist() == [
        pd.Timestamp("2026-11-29 14:11:01.250"),
        pd.Timestamp("2026-11-29 14:11:02.250"),
    ]


def test_missing_values_stay_missing() -> None:
    recs = [_timer(3, "global", {"fwd": 1.0}, rank=None)]
    f = records_frame("timer", recs)
    assert pd.isna(f["rank"].iloc[0])
    assert pd.isna(f["ts"].iloc[0])
    assert pd.isna(f["id"].iloc[0])
    assert pd.isna(f["micro_step"].iloc[0])
    assert str(f["rank"].dtype) == "Int64"
    assert str(f["micro_step"].dtype) == "Int64"


def test_dtypes_follow_annotations_even_when_empty() -> None:
    f = records_frame("throughput", [])
    assert f.empty
    assert list(f.columns) == [*BASE_COLUMNS, *field_dtypes("throughput")]
    assert str(f["samples_per_s"].dtype) == "float64"
    assert str(f["global_step"].dtype) == "Int64"
    assert str(f["mem_allocated_bytes"].dtype) == "Int64"
    assert pd.api.types.is_datetime64_any_dtype(f["ts"])


@pytest.mark.parametrize("kind", ["timer", "step", "throughput", "event"])
def test_no_stored_bodies_give_the_empty_frame_of_the_kind_each_its_own(kind: str) -> None:
    """A refresh asks each kind for new rows and most have none: that frame is built once,
    and what one reader does to its copy is not what the next reader gets."""
    expect = records_frame(kind, [])
    first = bodies_frame(kind, [], [])
    pd.testing.assert_frame_equal(first, expect)
    first["added"] = 1.0
    first.attrs["note"] = 3
    again = bodies_frame(kind, [], [])
    pd.testing.assert_frame_equal(again, expect)
    assert "note" not in again.attrs


def test_tuple_fields_stay_python_objects() -> None:
    rec = StepRecord(
        src=Source(run="r", line=5), step=5, skipped=0, lr=(1e-4, 2e-4), mom=((0.9, 0.999),)
    )
    f = records_frame("step", [rec])
    assert f["lr"].iloc[0] == (1e-4, 2e-4)
    assert f["mom"].iloc[0] == ((0.9, 0.999),)
    assert f["skipped"].iloc[0] == 0


def test_other_kinds_are_ignored_and_unknown_kind_raises() -> None:
    recs: list[Record] = [
        ThroughputRecord(src=Source(run="r", line=1), global_step=5, samples_per_s=127.5),
        _timer(2, "global", {"fwd": 1.0}),
    ]
    f = records_frame("throughput", recs, [1, 2])
    assert f["global_step"].tolist() == [5]
    assert f["id"].tolist() == [1]
    with pytest.raises(KeyError):
        records_frame("nope", [])


def test_real_timer_frame(z2_log_records: list[Record]) -> None:
    timers = [r for r in z2_log_records if r.KIND == "timer"]
    f = records_frame("timer", timers)
    assert len(f) == 90
    assert f["group"].value_counts().to_dict() == {"zero_optimizer": 30, "micro": 30, "global": 30}
    first = f[f["group"] == "global"].iloc[0]
    # tests/data/z2/train.log line 184:
    # [Rank 0] time (ms) | fwd: 350.75 | bwd: 754.18 | bwd_inner: 675.36 | bwd_allreduce: 78.63 | step: 190.22
    assert (first["line"], first["step"], first["rank"]) == (184, 1, 0)
    assert (first["fwd_ms"], first["bwd_ms"], first["bwd_allreduce_ms"], first["step_ms"]) == (
        350.75,
        754.18,
        78.63,
        190.22,
    )
    assert first["ts"] == pd.Timestamp("2026-11-29 14:11:04.882")


#: (Arrow's block size, rows a store read takes at a time, fewest rows read by Arrow). The
#: first, which the fast lane runs, takes every path at once: many blocks, many pages, Arrow.
READS = [(2048, 7, 1), (4 << 20, 200_000, 2000), (2048, 200_000, 2000), (4 << 20, 7, 2000)]


@pytest.mark.parametrize(("block_bytes", "page_rows", "arrow_min"), first_fast(READS))
def test_frames_from_stored_bodies_equal_frames_from_records(
    block_bytes: int, page_rows: int, arrow_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Store.frame`` builds frames from the stored JSON directly; the same frame as records.

    Also when Arrow parses the JSON in many blocks (in parallel), each inferring its fields,
    and when the store reads a kind a few rows at a time and joins the pages.
    """
    from dashboard_support import RUNS, shared_store

    from dsmon.model import arrow_frames
    from dsmon.model.arrow_frames import arrow_frame
    from dsmon.store.frames import pages

    monkeypatch.setattr(arrow_frames, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(pages, "FRAME_PAGE_ROWS", page_rows)
    monkeypatch.setattr(pages, "ARROW_MIN_ROWS", arrow_min)
    from dsmon.model.records import KINDS
    from dsmon.store.records.filter import RecordFilter
    from dsmon.store.store import open_store

    store = open_store(shared_store())
    compared, by_arrow = 0, set()
    for run in RUNS:
        for kind in KINDS:
            pairs = store.id_records(RecordFilter(run, kind))
            slow = records_frame(kind, [r for _, r in pairs], [i for i, _ in pairs])
            pd.testing.assert_frame_equal(store.frames.frame(run, kind), slow)
            rows = store._log.select_bodies(RecordFilter(run, kind))  # not GPU samples'
            fast = arrow_frame(kind, [i for i, _ in rows], [b for _, b in rows])
            if fast is not None:  # Arrow's reader, used for big frames: the same frame too
                pd.testing.assert_frame_equal(fast, slow)
                by_arrow.add(kind)
            compared += len(pairs)
    assert compared > 500  # every kind the corpus runs have
    assert {"timer", "step", "throughput"} <= by_arrow


def test_missing_text_from_arrow_is_none() -> None:
    """Arrow's frames hold text as ``str`` or None, never NaN or pandas' ``str`` dtype.

    ``assert_frame_equal`` (the test above) takes NaN and None for the same missing value;
    :func:`dsmon.model.arrow_frames.table_frame` promises None.
    """
    from dsmon.model import wire
    from dsmon.model.arrow_frames import arrow_frame

    named = TimerRecord(src=Source(run="r", file="train.log", line=2, node="worker-1", rank=1),
                        ts=None, step=2, group="global", values_ms={"fwd": 2.0})  # fmt: skip
    records = [_timer(1, "global", {"fwd": 1.0}, rank=None), named]
    fast = arrow_frame("timer", [1, 2], [wire.encode(r) for r in records])
    assert fast is not None
    assert [fast[name].dtype for name in ("node", "file", "group")] == [object] * 3
    assert fast["node"].tolist() == [None, "worker-1"]
    assert fast["group"].tolist() == ["global", "global"]


def test_arrow_reader_leaves_what_it_cannot_read_to_the_python_reader() -> None:
    """A time no calendar has (an old store may hold one) or a value of another type."""
    from dsmon.model import wire
    from dsmon.model.arrow_frames import arrow_frame

    good = wire.encode(_timer(1, "global", {"fwd": 1.0}))
    assert arrow_frame("timer", [1], [good]) is not None
    assert arrow_frame("timer", [1, 2], [good, good.replace("2026-11-29", "2026-19-39")]) is None
    assert arrow_frame("timer", [1, 2], [good, good.replace('"global"', "7")]) is None
    event = EventRecord(src=Source(run="r", file="a.log", line=3), name="oom",
                        detail={"rank": 1, "gpu": {"index": 0}})  # fmt: skip
    assert arrow_frame("event", [1], [wire.encode(event)]) is None  # a detail with keys


def test_list_columns_become_the_same_tuples_by_offsets_as_row_by_row() -> None:
    """lr/mom cut from flat values by offsets: sliced chunks, empty lists, nesting, nulls."""
    flat = pa.list_(pa.float64())
    cases = [
        pa.chunked_array([pa.array([[1.0], [2.0, 3.0], [4.0], [5.0]], flat).slice(1, 2)]),
        pa.chunked_array([pa.array([[[0.9, 0.999]], [[0.1], [0.2, 0.3]], []], pa.list_(flat))]),
        pa.chunked_array([pa.array([[1.0], None, [2.0]], flat), pa.array([[3.0]], flat)]),
        # every row of one length, as a run's lr and mom are: sliced, nested, empty
        pa.chunked_array([pa.array([[9.0, 9.5], [1.0, 2.0], [3.0, 4.0]], flat).slice(1, 2)]),
        pa.chunked_array([pa.array([[[0.9, 0.999]], [[0.8, 0.99]]], pa.list_(flat))]),
        pa.chunked_array([pa.array([[], []], flat)]),
        pa.chunked_array([pa.array([], flat)]),
    ]
    expected = [
        [(2.0, 3.0), (4.0,)],
        [((0.9, 0.999),), ((0.1,), (0.2, 0.3)), ()],
        [(1.0,), None, (2.0,), (3.0,)],
        [(1.0, 2.0), (3.0, 4.0)],
        [((0.9, 0.999),), ((0.8, 0.99),)],
        [(), ()],
        [],
    ]
    for column, want in zip(cases, expected, strict=True):
        assert _tuples(column) == want
