"""The ingest server's stores against a reference, on the real record mix the benchmark sends.

``bench/ingest.py`` measures the server on every record dsmon makes of the real runs of
``tests/data`` (their logs and the probe's per-rank files) and of the bundled demo run, copied
as from several runs, with an 8-GPU node's NVML samples mixed in: timers, rank steps,
heartbeats, step lines, events, GPU samples. The server's path takes shortcuts the plain path
does not: rows made of checked lines without records, keys bound as ``bytearray``, the
summary tables (per-rank, timers, skipped steps) fed from the batch in hand and from the
lines it decoded. Here the same mix, in the sender's batches, fills two stores: one through
the server's path, the other with its records, its summary tables read back from
``records`` by SQL (no batch in hand, no decoded line) and their rows written one to a
statement. Every table must hold the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fakes import eight_gpus_two_models
from lanes import sample
from locations import DATA, ROOT
from shared_fixtures import STORE_BACKENDS
from sql_support import store_sql

from collectors.gpu.nvml import NvmlPoller
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.load.rotated import Carries
from dsmon.model import wire
from dsmon.model.records import Record
from dsmon.parse.base import Diagnostics
from dsmon.serve.batch import parse_batch_rows
from dsmon.store.backend import Db
from dsmon.store.records.added import Added
from dsmon.store.sqlite import SQLiteDb
from dsmon.store.store import Store

#: Records a sender puts in one batch.
BATCH = 2000
#: A poll of 8 GPUs after this many log records: a tenth of the mix, as the benchmark's.
POLL_EVERY = 72


def copy_records(copy: str) -> list[Record]:
    """Every record of the real runs and the demo run, each run named ``<folder>-<copy>``.

    Each folder is read as ``dsmon import`` reads it (logs, the probe's files, side files);
    a collector's GPU polls are mixed in.
    """
    runs = sorted(p for p in DATA.iterdir() if p.is_dir())
    # the probe's runs whole (only they fill the per-rank tables); of the logs, the fast lane
    # takes every fourth
    probed = [p for p in runs if (p / "probe").is_dir()]
    logs = sample([p for p in runs if p not in probed])
    folders = [*probed, *logs, ROOT / "dsmon" / "data" / "demo"]
    recs: list[Record] = []
    for folder in folders:
        carries: Carries = {}
        run = f"{folder.name}-{copy}"
        for found in discover(folder):
            recs += read_found(found, run, Diagnostics(), carries=carries)
    polls = gpu_polls(f"gpus-{copy}")
    out: list[Record] = []
    for i, rec in enumerate(recs):
        out.append(rec)
        if i % POLL_EVERY == POLL_EVERY - 1:
            out += next(polls)
    return out


def gpu_polls(run: str) -> Iterator[list[Record]]:
    """A collector's polls of a node's 8 GPUs (four H100s, four A100s), one a second."""
    clock = [datetime(2026, 12, 1, 8, 0, 0)]

    def now() -> datetime:
        clock[0] += timedelta(seconds=1)
        return clock[0]

    logging.getLogger("collectors").setLevel(logging.ERROR)  # the A100s' "no GPM" notes
    poller = NvmlPoller(eight_gpus_two_models(), run=run, node="node00", now=now)
    poller.start()
    while True:
        yield list(poller.poll())


def every_table(store: Store) -> dict[str, list[tuple[object, ...]]]:
    """Every table of a store, rows sorted (a run's ``received_at`` is the clock's)."""
    if store.backend.dialect.name == "sqlite":
        listed = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
    else:
        listed = (
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() ORDER BY table_name"
        )
    out = {}
    for (name,) in store_sql(store, listed):
        cols = "run, restamps" if name == "run_activity" else "*"
        out[str(name)] = sorted(store_sql(store, f"SELECT {cols} FROM {name}"), key=repr)
    return out


@pytest.mark.parametrize("backend_store", list(STORE_BACKENDS))
def test_the_server_stores_the_real_mix_as_its_records_are_stored(
    backend_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each backend (PostgreSQL has no bulk insert of its own to set aside)."""
    records = [*copy_records("a"), *copy_records("b")]
    batches = [records[i : i + BATCH] for i in range(0, len(records), BATCH)]
    bodies = [("\n".join(wire.encode(r) for r in part) + "\n").encode() for part in batches]
    opener = STORE_BACKENDS[backend_store]
    (tmp_path / "served").mkdir()
    (tmp_path / "plain").mkdir()

    with opener(tmp_path / "served") as store:
        served = [store.add(parse_batch_rows(body), live=True) for body in bodies]
        got = every_table(store)
    with monkeypatch.context() as m:  # the reference: summary tables read back by SQL,
        m.setattr(Added, "of_kind", lambda self, kind: None)  # their rows one to a statement
        m.setattr(SQLiteDb, "insert_many", Db.insert_many)
        with opener(tmp_path / "plain") as store:
            plain = [store.add(part, live=True) for part in batches]
            want = every_table(store)

    assert served == plain == [len(part) for part in batches]
    assert got.keys() == want.keys()
    for name in ("records", "gpu_samples", "rank_steps", "rank_comm", "rank_beats",
                 "timer_steps", "timer_optimizer_steps", "step_skips"):  # fmt: skip
        assert got[name], name  # the mix reaches every summary table
    for name in got:
        assert got[name] == want[name], name
