"""GPU samples in the store: stored in typed tables, read back equal, bucketed equal everywhere.

The same checks run on every backend (``store`` fixture): SQLite and PostgreSQL keep samples
in the same typed tables with roll-ups and answer in SQL. Both must give back what was
stored and the same summaries and buckets as the samples in memory give.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from gpu_support import RUN, day, odd_ones, sample
from shared_fixtures import STORE_BACKENDS

from dsmon.model import wire
from dsmon.model.frames import records_frame
from dsmon.model.records import EventRecord, GpuSampleRecord, Record, Source
from dsmon.store.gpu import buckets, reads
from dsmon.store.gpu.buckets import BucketGrid
from dsmon.store.gpu.samples import GpuSamples
from dsmon.store.records.filter import RecordFilter
from dsmon.store.store import Store, open_store


def test_samples_come_back_equal_and_once(store: Store) -> None:
    recs = [*day(50), *odd_ones()]
    assert store.add(recs) == len(recs)
    assert store.add(recs[:40]) == 0
    back = store.records(RUN, "gpu")
    want = [r for r in recs if isinstance(r, GpuSampleRecord)]
    assert sorted(map(repr, back)) == sorted(map(repr, want))
    info = store.runs()[0]
    assert info.kinds == {"event": 1, "gpu": len(want)}
    assert set(info.nodes) == {"n0", "n1", "n2"}


def test_non_finite_numbers_come_back_as_their_json_form_does(store: Store) -> None:
    """inf and nan in any float field: the batch is stored whole, each value read back as None.

    None is what the record's JSON form holds for them (``wire``), so a sample added directly
    comes back as it would after ``dsmon parse`` and an ingest. One such value used to fail
    the whole batch (an integer column cannot take inf).
    """
    floats = [f.name for f in dataclasses.fields(GpuSampleRecord) if f.type == "float | None"]
    cases = [(name, value) for name in floats for value in (math.inf, -math.inf, math.nan)]
    odd = [sample(100 + i, 0, **{name: value}) for i, (name, value) in enumerate(cases)]
    recs = [*day(3), *odd]
    assert store.add(recs) == len(recs)
    back = store.records(RUN, "gpu")
    want = [wire.from_dict(wire.to_dict(r)) for r in recs]
    assert sorted(map(repr, back)) == sorted(map(repr, want))
    assert sum(r.power_w is None for r in back if isinstance(r, GpuSampleRecord)) == 3


def test_paging_by_id_sees_every_record_once_in_order(store: Store) -> None:
    for sec in range(0, 120, 10):  # live batches: ten seconds of samples, then an event
        store.add(day(sec + 10)[sec * 4 :])
        store.add([EventRecord(src=Source(run=RUN, file="a.log", line=sec + 1), name="tick")])
    pairs = []
    after = 0
    while True:
        page = store.id_records(RecordFilter(RUN, after_id=after, limit=37))
        pairs += page
        if len(page) < 37:
            break
        after = page[-1][0]
    ids = [i for i, _ in pairs]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) == 120 * 4 + 12
    assert [r.KIND for _, r in pairs].count("event") == 12
    scanned = list(store.scan(RUN, "gpu", chunk=50))
    assert len(scanned) == 480 and len({(r.src.node, r.gpu_index, r.ts) for r in scanned}) == 480
    assert store.last_id(RUN) == ids[-1]


def _another(store: Store) -> Store:
    """A second store object (another connection) on the same data."""
    return open_store(store.url)


def test_paging_reads_records_and_samples_in_one_snapshot(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches committed between the records read and the samples read are seen by neither.

    Otherwise a reader would get the samples of a later batch but not the records of an
    earlier one, move its cursor past them and never see them.
    """
    store.add([EventRecord(src=Source(run=RUN, file="a.log", line=1), name="first")])
    other = _another(store)
    late = [EventRecord(src=Source(run=RUN, file="a.log", line=2), name="late"), *day(3)]
    real_select = GpuSamples.select

    def select_after_other_writes(*args: object) -> object:
        if late:
            other.add(late[:1])  # a batch of records...
            other.add(late[1:])  # ...then one of samples, with higher ids
            late.clear()
        return real_select(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(GpuSamples, "select", staticmethod(select_after_other_writes))
    seen = store.id_records(RecordFilter(RUN, after_id=0))
    monkeypatch.undo()
    seen += store.id_records(RecordFilter(RUN, after_id=seen[-1][0]))
    other.close()
    assert [r.KIND for _, r in seen] == ["event", "event", *["gpu"] * 12]


def _close(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Frames equal up to float rounding (sums taken in another order), column by column."""
    assert list(a["gpu"]) == list(b["gpu"])
    for col in a.columns:
        left, right = a[col], b[col]
        if pd.api.types.is_numeric_dtype(left) and pd.api.types.is_numeric_dtype(right):
            pd.testing.assert_series_equal(left.astype(float), right.astype(float),
                                           check_names=False, rtol=1e-9)  # fmt: skip
        else:
            assert [str(x) for x in left] == [str(x) for x in right], col


@pytest.fixture(scope="module")
def hour() -> tuple[list[GpuSampleRecord], pd.DataFrame]:
    """An hour of samples (60 one-minute roll-up buckets per GPU) and their frame, made once."""
    recs = day(3600)
    return recs, records_frame("gpu", recs)


@pytest.fixture(scope="module", params=list(STORE_BACKENDS))
def hour_store(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    hour: tuple[list[GpuSampleRecord], pd.DataFrame],
) -> Iterator[Store]:
    """A store of each backend holding :func:`hour`, filled once for the tests that only read it."""
    store = STORE_BACKENDS[request.param](tmp_path_factory.mktemp("hour"))
    store.add(hour[0])
    yield store
    store.close()


@pytest.mark.parametrize("n_buckets", [None, 7, 60])
def test_store_buckets_like_memory(
    hour_store: Store, hour: tuple[list[GpuSampleRecord], pd.DataFrame], n_buckets: int | None
) -> None:
    store, frame = hour_store, hour[1]
    if n_buckets is None:
        got = buckets.grid_of_samples(frame, None)
        _close(store.gpu.summary(RUN), buckets.summary(got.stats, got.series))
        return
    mine = store.gpu.buckets(RUN, n_buckets)
    assert len(mine) >= n_buckets // 4 * 4  # a roll-up may give fewer, wider buckets
    # Every sample is counted once, extremes are kept...
    assert mine.groupby("gpu")["n"].sum().tolist() == [3600] * 4
    assert mine["util_gpu_pct_max"].max() == 100.0
    # ...and on the store's grid, the samples in memory give the same buckets.
    grid = store.gpu.grid(RUN, n_buckets)
    theirs = buckets.per_bucket(
        buckets.stats_of_samples(frame, grid.t0_ms, grid.width_ms),
        buckets.series_frame(frame)[0],
        grid.t0_ms,
        grid.width_ms or 1,
    )
    _close(mine, theirs)


def test_replay_cutoff_reads_only_samples_before_it(store: Store) -> None:
    recs = day(600)
    store.add(recs)
    cut = "2026-11-29T10:05:00.000"
    summary = store.gpu.summary(RUN, ts_max=cut).set_index("gpu")
    # seconds 0..299 of every GPU, and second 300 of gpu0 (its ts is 10:05:00.000)
    assert summary["samples"].tolist() == [301, 300, 301, 300]
    assert str(summary["last_ts"].max()) == "2026-11-29 10:05:00"
    latest = {(r.src.node, r.gpu_index): r.ts for r in store.gpu.latest(RUN, ts_max=cut)}
    assert latest[("n0", 0)] == cut and latest[("n1", 1)] == "2026-11-29T10:04:59.001"


def test_traces_of_chosen_gpus_only(store: Store) -> None:
    store.add(day(300))
    got = store.gpu.buckets(RUN, 30, gpus=["n1/gpu0"])
    assert set(got["gpu"]) == {"n1/gpu0"} and got["n"].sum() == 300


N2, G2 = ("n0", "n1"), (0, 1)


def _in_order(stats: pd.DataFrame) -> pd.DataFrame:
    return stats.sort_values(["series", "b"]).reset_index(drop=True)


def _buckets(got: BucketGrid) -> pd.DataFrame:
    return got.per_bucket()


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The first bucket of each SQL read of bucket statistics while the test runs (0: all)."""
    found: list[int] = []
    real = reads.stats

    def stats(*args: object, **kwargs: object) -> pd.DataFrame:
        found.append(int(kwargs.get("from_bucket", 0)))  # type: ignore[call-overload]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reads, "stats", stats)
    return found


def test_a_grid_handed_back_is_read_again_from_its_first_changed_bucket(
    store: Store, starts: list[int]
) -> None:
    """``gpu.grid(since=...)``: the same buckets as a whole grid, reading only what changed.

    Seconds appended (a live run), a sample late by minutes (a collector back from an
    outage), another run's, nothing new, a grid grown wider, a replay position.
    """
    store.add(day(600))  # ten one-minute buckets of 4 GPUs
    got = store.gpu.grid(RUN, 30)
    late = dataclasses.replace(sample(100, 0), ts="2026-11-29T10:01:40.500", power_w=999.0)
    other = dataclasses.replace(sample(130, 1), src=Source(run="other", node="n9"))
    steps: list[tuple[list[Record], int]] = [
        # a minute without temperatures: its columns come back empty, those before do not
        (
            [sample(s, g, n, temperature_c=None) for s in range(600, 630) for n in N2 for g in G2],
            10,
        ),
        ([late], 1),
        ([], 10),  # nothing new: the last bucket only
        ([other], 2),  # another run's samples of minute 2: read again from there
        ([sample(3000, 0), sample(3000, 1)], 0),  # 50 minutes: wider buckets, all again
    ]
    for recs, first in steps:
        store.add(recs)
        starts.clear()
        again = store.gpu.grid(RUN, 30, since=got)
        assert starts == [first]
        whole = store.gpu.grid(RUN, 30)
        assert (again.t0_ms, again.width_ms) == (whole.t0_ms, whole.width_ms)
        pd.testing.assert_frame_equal(_buckets(again), _buckets(whole))
        pd.testing.assert_frame_equal(_in_order(again.stats), _in_order(whole.stats))
        got = again
    # the late sample is in (no other sample draws more than 700 W)
    assert _buckets(got).query("gpu == 'n0/gpu0'")["power_w_max"].max() == 999.0
    starts.clear()
    cut = "2026-11-29T10:09:00.000"  # a replay position reads whole, whatever it is handed
    pd.testing.assert_frame_equal(
        _buckets(store.gpu.grid(RUN, 30, cut, since=got)), store.gpu.buckets(RUN, 30, cut)
    )
    assert starts == [0, 0]


def test_sqlite_layout_is_compact(tmp_path: Path) -> None:
    """About 60 bytes per sample for the samples table (the JSON rows took ~600)."""
    store = open_store(tmp_path / "s.sqlite")
    store.add(day(2500))
    store.close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    conn.execute("VACUUM")
    pages = (
        conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE name IN ('gpu_samples')").fetchone()[0]
        if _has_dbstat(conn)
        else None
    )
    conn.close()
    if pages is None:
        pytest.skip("this SQLite has no dbstat table")
    assert pages / 10_000 <= 60


def _has_dbstat(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1 FROM dbstat LIMIT 1")
    except sqlite3.OperationalError:
        return False
    return True


def test_a_live_summary_handed_back_is_read_again_only_from_its_split(
    store: Store, starts: list[int]
) -> None:
    """``gpu.grid(None, since=...)``: a summary equal to a whole one, split at the newest
    ten-minute roll-up; only the part from the split is read again while it can be.

    Seconds appended, nothing new, a sample late by minutes and another run's sample before
    the split, a run grown an hour past it, a GPU first seen, a replay position.
    """
    store.add(day(900))  # 10:00-10:15 of 4 GPUs: the split at 10:10
    got = store.gpu.grid(RUN, None)
    ten_past = int(pd.Timestamp("2026-11-29T10:10:00").value // 10**6)
    assert got.split_ms == ten_past and set(got.stats["b"]) == {0, 1}
    late = dataclasses.replace(sample(100, 0), ts="2026-11-29T10:01:40.500", power_w=999.0)
    other = dataclasses.replace(sample(130, 1), src=Source(run="other", node="n9"))
    hour_on = dataclasses.replace(sample(0, 1), ts="2026-11-29T11:20:00.000")
    steps: list[tuple[list[Record], int, str]] = [
        ([sample(s, g, n) for s in range(900, 930) for n in N2 for g in G2], 1, "10:10"),
        ([], 1, "10:10"),  # nothing new: the part from the split only
        ([late], 0, "10:10"),  # before the split: whole again
        ([other], 0, "10:10"),
        ([hour_on], 0, "11:20"),  # the part from the split grew past an hour: split anew
        ([sample(s, 0, "n2") for s in range(1000, 1010)], 0, "11:20"),  # a new GPU
    ]
    for recs, first, split in steps:
        store.add(recs)
        starts.clear()
        again = store.gpu.grid(RUN, None, since=got)
        assert starts == [first]
        assert again.split_ms == int(pd.Timestamp(f"2026-11-29T{split}").value // 10**6)
        _close(buckets.summary(again.stats, again.series), store.gpu.summary(RUN))
        got = again
    summary = buckets.summary(got.stats, got.series).set_index("gpu")
    assert summary.loc["n0/gpu0", "power_w_max"] == 999.0  # the late sample is in
    assert summary.loc["n2/gpu0", "samples"] == 10 and summary["samples"].sum() == 3732
    starts.clear()
    cut = "2026-11-29T10:09:00.000"  # a replay position reads whole, whatever it is handed
    replayed = store.gpu.grid(RUN, None, cut, since=got)
    assert starts == [0] and replayed.split_ms is None
    _close(buckets.summary(replayed.stats, replayed.series), store.gpu.summary(RUN, cut))
