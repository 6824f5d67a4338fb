"""The ingest server's fast path against the plain path, on the real runs of the corpus.

The server makes a batch's rows without building records (``dsmon.serve.rows``: the lines cut
as bytes, times checked once per batch, a collector's GPU sample checked by its form) and
binds them in its own way (``dsmon.store.sqlite.insert_rows``). The plain path builds every
record (``parse_line``) and stores records. On every real run of ``tests/data`` and of the
shared DeepSpeed corpus (``../shared/corpus/ds-cpu`` beside the clone), with GPU samples as a
collector sends them mixed in, both must make the same rows, and stores filled both ways
must hold the same tables, on each backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from locations import DATA, ROOT
from server_support import reference_rows
from shared_fixtures import STORE_BACKENDS
from sql_support import store_sql

from dsmon.model import wire
from dsmon.model.records import GpuSampleRecord, Record, Source
from dsmon.parse.log import parse_text
from dsmon.serve.batch import parse_batch_rows
from dsmon.serve.rows import check_lines
from dsmon.store.store import Store

#: The shared corpus of real DeepSpeed CPU runs, beside the clone.
DS_CPU = ROOT.parent / "shared" / "corpus" / "ds-cpu"
RUN = "job"
#: Records a sender puts in one batch.
BATCH = 2000
#: Tables a write fills, with the columns compared (a run's ``received_at`` is the clock's).
TABLES = {
    "records": "*", "run_kinds": "*", "run_sources": "*", "run_activity": "run, restamps",
    "gpu_series": "*", "gpu_samples": "*", "gpu_rollup": "*", "gpu_batches": "*",
    "rank_steps": "*", "rank_comm": "*", "rank_step_stats": "*", "rank_busy": "*",
    "rank_beats": "*", "rank_beat_steps": "*", "rank_stat_blocks": "*", "timer_steps": "*",
    "timer_optimizer_steps": "*", "timer_names": "*", "timer_blocks": "*",
    "timer_unplaced": "*", "step_skips": "*",
}  # fmt: skip


def corpus_logs(folder: Path) -> list[Path]:
    """The ``train.log`` of every run in ``folder``; skipped (failed in CI) if it has none."""
    logs = sorted(folder.glob("*/train.log"))
    if not logs:
        if os.environ.get("CI"):
            pytest.fail(f"no runs in {folder}")
        pytest.skip(f"no runs in {folder} (../shared beside the clone)")
    return logs


def gpu_samples(node: str, n: int) -> list[GpuSampleRecord]:
    """``n`` polls of two GPUs as a collector sends them, an H100 (GPM) and an A100 (none).

    Every fifth poll's H100 draws a power that is not a whole milliwatt: kept in ``extra``,
    through its record.
    """
    out = []
    for i in range(n):
        ts = f"2026-11-29T14:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}"
        for gpu, gpm in ((0, (55.25, 43.5, 12.75)), (1, (None, None, None))):
            out.append(
                GpuSampleRecord(
                    src=Source(run=RUN, node=node),
                    ts=ts,
                    gpu_index=gpu,
                    name=f"gpu{gpu}",
                    util_gpu_pct=float(i % 100),
                    mem_used_bytes=1024 * (i + 7),
                    power_w=612.345 + (0.0001 if gpu == 0 and i % 5 == 0 else 0.0),
                    energy_j=1000.5 * i,
                    pcie_tx_bytes_per_s=2048.0 * i,
                    gpm_sm_active_pct=gpm[0],
                    gpm_tensor_active_pct=gpm[1],
                    gpm_dram_bw_pct=gpm[2],
                    throttle_reasons=i % 8,
                )  # fmt: skip
            )
    return out


def mixed(logs: list[Path]) -> list[Record]:
    """The logs' records as two nodes send them, a GPU poll after every 20 records."""
    out: list[Record] = []
    for node in ("node-a", "node-b"):
        recs: list[Record] = []
        for path in logs:
            label = f"{path.parent.name}/{path.name}"
            text = path.read_text(encoding="utf-8", errors="replace")
            recs += parse_text(text, RUN, label, node)[0]
        polls = iter(gpu_samples(node, len(recs) // 20 + 1))
        for i, rec in enumerate(recs):
            out.append(rec)
            if i % 20 == 19:
                out += [next(polls), next(polls)]
    return out


def bodies(records: list[Record]) -> Iterator[tuple[list[Record], bytes]]:
    """The records in a sender's batches, with the body that carries each."""
    for start in range(0, len(records), BATCH):
        part = records[start : start + BATCH]
        yield part, ("\n".join(wire.encode(r) for r in part) + "\n").encode()


def assert_rows_as_records_make(logs: list[Path]) -> None:
    """Every batch: the server's rows are the plain path's, nearly every line without a record."""
    left = total = 0
    for part, body in bodies(mixed(logs)):
        assert parse_batch_rows(body) == reference_rows(body)
        left += len(check_lines(body).others)
        total += len(part)
    assert left < total / 20  # the samples kept through their records, and few others


def test_a_real_mix_makes_the_rows_its_records_make() -> None:
    """Probe files aside, a ZeRO-2 run, an fp16 run and a crash's events (non-ASCII text)."""
    names = ("z2", "fp16_zero2", "events_crash_after_relaunch", "comms_logger_verbose")
    assert_rows_as_records_make([DATA / name / "train.log" for name in names])


@pytest.mark.slow
@pytest.mark.parametrize("folder", [DATA, DS_CPU], ids=["tests-data", "ds-cpu"])
def test_every_real_run_makes_the_rows_its_records_make(folder: Path) -> None:
    assert_rows_as_records_make(corpus_logs(folder))


def tables(store: Store) -> dict[str, list[tuple[object, ...]]]:
    """What the write path filled, table by table, rows sorted."""
    return {
        name: sorted((tuple(r) for r in store_sql(store, f"SELECT {cols} FROM {name}")), key=repr)
        for name, cols in TABLES.items()
    }


@pytest.mark.slow
def test_stores_filled_by_the_server_and_by_records_hold_the_same(
    store: Store, tmp_path: Path
) -> None:
    """Batch by batch, the server's rows and the records themselves, into stores alike."""
    (tmp_path / "plain").mkdir()
    plain = STORE_BACKENDS[store.backend.dialect.name](tmp_path / "plain")
    try:
        for part, body in bodies(mixed(corpus_logs(DS_CPU))):
            assert store.add(parse_batch_rows(body), live=True) == plain.add(part, live=True)
        served, made = tables(store), tables(plain)
    finally:
        plain.close()
    assert all(served[t] for t in ("records", "gpu_samples", "timer_steps", "step_skips"))
    assert served == made
    if store.backend.dialect.name == "sqlite":  # keys bound as bytearray: BLOBs all the same
        assert store_sql(store, "SELECT DISTINCT typeof(key) FROM records") == [("blob",)]
