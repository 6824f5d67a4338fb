"""GPU samples stored in id order, found by time through the blocks of ``gpu_batches``.

Samples have no (GPU, time) index: every read by time goes through the blocks
(:mod:`dsmon.store.gpu.blocks`). These tests write as a live run does (each node posts its
own second of samples), late and again, and check that every read by time still finds every
sample once, on both backends.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpu_support import RUN, day, odd_ones, sample
from sql_support import store_sql

from dsmon.model.records import GpuSampleRecord
from dsmon.store.gpu import blocks as gpu_blocks
from dsmon.store.gpu.rows import unpack_gpm
from dsmon.store.store import Store, open_store

NODES = ("n0", "n1")


def live(seconds: range) -> Iterator[list[GpuSampleRecord]]:
    """The batches a live run's collectors post: each node its own second of samples."""
    for sec in seconds:
        for node in NODES:
            yield [sample(sec, g, node) for g in (0, 1)]


def _direct(store: Store) -> Callable[[str], list[tuple[object, ...]]]:
    """SQL on the store's database, past the Store interface."""
    return lambda q: store_sql(store, q)


def _reads(store: Store) -> tuple[object, ...]:
    """Every read by time a page or client makes, as text that compares exactly (NaN too)."""
    cut = "2026-11-29T10:01:30.000"
    latest = store.gpu.latest(RUN)
    return (
        sorted(map(repr, store.records(RUN, "gpu"))),
        store.gpu.buckets(RUN, 50, ts_max=cut).to_csv(index=False),
        store.gpu.buckets(RUN, 2000).to_csv(index=False),  # finer than a roll-up: samples
        sorted(map(repr, latest)),
        sorted(map(repr, store.gpu.latest(RUN, ts_max=cut))),
    )


def test_a_live_run_is_read_by_time_through_few_blocks(store: Store) -> None:
    for batch in live(range(0, 120)):
        store.add(batch)
    blocks = _direct(store)("SELECT n, t_max_ms - t_min_ms FROM gpu_batches ORDER BY last_id")
    # 480 batches of 2 samples; a block spans at most 10 s: 12 blocks of 40 samples
    assert len(blocks) == 12 and {n for n, _ in blocks} == {40}
    spans = [int(str(span)) for _, span in blocks]
    assert max(spans) <= gpu_blocks.BLOCK_SPAN_MS
    newest = store.gpu.latest(RUN)
    assert sorted((r.src.node, r.gpu_index, r.ts) for r in newest) == sorted(
        (node, g, sample(119, g, node).ts) for node in NODES for g in (0, 1)
    )
    cut = store.gpu.latest(RUN, ts_max="2026-11-29T10:01:00.000")
    # gpu0's sample of second 60 is at the cut-off, gpu1's a millisecond after it
    assert sorted(r.ts for r in cut) == sorted([sample(60, 0).ts, sample(59, 1).ts] * 2)


def test_late_and_resent_samples_are_found_and_stored_once(store: Store, tmp_path: Path) -> None:
    """An outage's samples arrive late, and a collector sends again what it sent before."""
    recs = day(300)
    on_time = [r for r in recs if r.src.node == "n0"]
    late = [r for r in recs if r.src.node == "n1"]
    for i in range(0, len(on_time), 4):
        store.add(on_time[i : i + 4])
    store.add(late[:700])  # the outage's samples, late: a block of their own
    store.add(on_time[100:300])  # sent again after a restart
    store.add([*late[650:], *odd_ones()])  # partly again
    want = sorted(map(repr, [r for r in [*recs, *odd_ones()] if isinstance(r, GpuSampleRecord)]))
    assert sorted(map(repr, store.records(RUN, "gpu"))) == want
    assert store.gpu.summary(RUN)["samples"].tolist()[:4] == [300] * 4
    (tmp_path / "fresh").mkdir()
    fresh = open_store(tmp_path / "fresh" / "s.sqlite")  # the same, stored in one go
    fresh.add([*recs, *odd_ones()])
    assert _reads(store) == _reads(fresh)
    fresh.close()


def gpm_ones() -> list[GpuSampleRecord]:
    """Hopper samples: GPM metrics as the collector rounds them, and as NVML gave them."""
    return [
        sample(6000, 3, "n3", gpm_sm_active_pct=71.5, gpm_tensor_active_pct=43.25,
               gpm_dram_bw_pct=0.0),
        sample(6001, 3, "n3", gpm_sm_active_pct=100.0, gpm_tensor_active_pct=None,
               gpm_dram_bw_pct=54.99),
        sample(6002, 3, "n3", gpm_sm_active_pct=71.50493, gpm_tensor_active_pct=12.5,
               gpm_dram_bw_pct=54.996128),  # an older collector's doubles
        sample(6003, 3, "n3", gpm_sm_active_pct=200.0, gpm_tensor_active_pct=-1.0,
               gpm_dram_bw_pct=163.83),  # outside what 14 bits hold
    ]  # fmt: skip


def test_gpm_metrics_are_packed_into_one_column_and_come_back_equal(store: Store) -> None:
    recs = gpm_ones()
    store.add(recs)
    assert sorted(map(repr, store.records(RUN, "gpu"))) == sorted(map(repr, recs))
    assert repr(store.gpu.latest(RUN)[0]) == repr(recs[-1])
    rows = _direct(store)("SELECT gpm, extra FROM gpu_samples ORDER BY id")
    packed = [unpack_gpm(gpm) for gpm, _ in rows]
    assert packed[0] == {"gpm_sm_active_pct": 71.5, "gpm_tensor_active_pct": 43.25,
                         "gpm_dram_bw_pct": 0.0}  # fmt: skip
    assert packed[1]["gpm_tensor_active_pct"] is None and rows[1][1] is None
    # what the column cannot hold exactly is kept, as it came, in extra
    assert json.loads(str(rows[2][1])) == {"gpm_sm_active_pct": 71.50493,
                                           "gpm_dram_bw_pct": 54.996128}  # fmt: skip
    assert rows[3][0] is None and len(json.loads(str(rows[3][1]))) == 3


def test_merged_ranges_join_close_ones_and_keep_at_most_the_limit() -> None:
    assert gpu_blocks.merged([(9000, 9100), (1, 100), (90, 120)]) == [(1, 120), (9000, 9100)]
    far = [(i * 10_000, i * 10_000 + 5) for i in range(100)]
    out = gpu_blocks.merged(far)
    assert len(out) == gpu_blocks.MAX_RANGES
    assert out[0][0] == 0 and out[-1][1] == 990_005
    assert all(b[0] > a[1] for a, b in zip(out, out[1:], strict=False))
    assert gpu_blocks.clipped([(1, 120), (500, 600)], 100, 550) == [(100, 120), (500, 550)]
    assert gpu_blocks.merged([(1, 100), (5000, 5100)]) == [(1, 100), (5000, 5100)]
    assert gpu_blocks.merged([(1, 100), (4000, 4100)]) == [(1, 4100)]  # a gap under 4096
    assert gpu_blocks.clipped(None, 7, None)[0][0] == 7
    assert gpu_blocks.clipped([(1, 5)], 6, None) == []


def test_sqlite_pages_of_a_live_run_are_full(tmp_path: Path) -> None:
    """Written as a live run writes them, the samples table's pages are not left part empty."""
    store = open_store(tmp_path / "s.sqlite")
    for batch in live(range(0, 1200)):
        store.add(batch)
    store.close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    try:
        found = conn.execute(
            "SELECT SUM(pgsize), SUM(unused) FROM dbstat WHERE name = 'gpu_samples'"
        ).fetchone()
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table")
    finally:
        conn.close()
    size, unused = found
    assert unused / size < 0.03  # keyed by GPU and time, 11 % of the pages was free space
    assert size / 4800 <= 60
