"""Store keys: unique per identity, sorted as a log is written, and older stores re-keyed.

The keys are what the UNIQUE index holds, so their order decides where each insert lands:
a real log's records must get keys that grow with their place in the log. A store written
with schema version 1 (one 16-byte digest of the identity per key) must be re-keyed by its
first writer, or every record a collector sends again after the upgrade is stored twice.
"""

from __future__ import annotations

import hashlib
import logging
from itertools import pairwise
from pathlib import Path

import pytest
from sql_support import sql_rows, sqlite_sql

from dsmon.model.records import Record, record_key
from dsmon.serve.run import start_ingest_server
from dsmon.store import rekey
from dsmon.store.base import SCHEMA_VERSION, Store
from dsmon.store.keys import KEY_BYTES, identity_digest, key_digest
from dsmon.store.postgres import PgStore
from dsmon.store.sqlite import SQLiteStore


def _v1_key(rec: Record) -> bytes:
    """The key schema version 1 stored: one 16-byte digest of the identity's text."""
    text = "\x1f".join(str(part) for part in record_key(rec))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _version(store: Store) -> int:
    if isinstance(store, SQLiteStore):
        return int(sql_rows(store, "PRAGMA user_version")[0][0])
    found = sql_rows(store, "SELECT value FROM dsmon_meta WHERE name = 'schema_version'")
    return int(found[0][0])


def _make_version_1(store: Store, records: list[Record]) -> None:
    """Turn the store into what a dsmon of schema version 1 left: the same rows, old keys."""
    store.add(records)
    ids = [row[0] for row in sql_rows(store, "SELECT id FROM records ORDER BY id")]
    sql_rows(store, "UPDATE records SET key = ? WHERE id = ?",
         [(_v1_key(r), i) for r, i in zip(records, ids, strict=True)])  # fmt: skip
    if isinstance(store, SQLiteStore):
        sql_rows(store, "PRAGMA user_version = 1")
    else:
        sql_rows(store, "UPDATE dsmon_meta SET value = '1' WHERE name = 'schema_version'")


def _reopen(store: Store) -> Store:
    return SQLiteStore(store.path) if isinstance(store, SQLiteStore) else PgStore(store.url)


def test_keys_of_a_real_log_are_unique_and_grow_with_its_lines(
    z2_log_records: list[Record],
) -> None:
    keys = [key_digest(r) for r in z2_log_records]
    assert len(set(keys)) == len(keys) == len({record_key(r) for r in z2_log_records})
    assert {len(k) for k in keys} == {KEY_BYTES}
    assert len({k[:8] for k in keys}) == 1  # one file: one source part
    places = [(r.src.offset, k[8:16]) for r, k in zip(z2_log_records, keys, strict=True)]
    assert all(r.src.offset is not None for r in z2_log_records)
    for (off_a, key_a), (off_b, key_b) in pairwise(sorted(places)):
        assert key_a <= key_b, (off_a, off_b)
    assert len({p for _, p in places}) > len(keys) // 2  # the place part really varies


def test_keys_by_line_and_by_time_grow_too() -> None:
    lines = [identity_digest("r", "n", "f", f"l{i}", 0, "timer") for i in (9, 10, 11, 200)]
    assert lines == sorted(lines)
    times = ["2026-11-29T14:11:09.5", "2026-11-29T14:11:09.75", "2026-11-29T14:11:10.000"]
    by_time = [identity_digest("r", "n", "f", f"t{t}", 0, "step") for t in times]
    assert by_time == sorted(by_time)
    gpus = [identity_digest("r", "n", "", f"g{g}@{times[0]}", 0, "gpu") for g in (0, 1)]
    assert gpus[0] != gpus[1]  # same time, another GPU: the identity part tells them apart


def test_records_of_one_place_get_distinct_keys() -> None:
    one_line = {identity_digest("r", "n", "f", "o500", sub, kind)
                for sub in range(3) for kind in ("timer", "step")}  # fmt: skip
    assert len(one_line) == 6
    odd = identity_digest("r", "n", "f", "o" + "9" * 40, 0, "timer")  # beyond 64 bits
    assert len(odd) == KEY_BYTES


def test_a_version_1_store_is_rekeyed_by_its_first_writer(
    store: Store,
    z2_log_records: list[Record],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = z2_log_records
    _make_version_1(store, records)
    reader = _reopen(store)
    assert reader.records("z2") == records  # reads as it is, and takes no write lock
    assert _version(store) == 1
    reader.close()

    monkeypatch.setattr(rekey, "REKEY_CHUNK", 7)  # re-keyed in many steps
    monkeypatch.setattr(rekey, "PROGRESS_ROWS", 50)  # with a line every 50 rows or so
    writer = _reopen(store)
    with caplog.at_level(logging.INFO, logger="dsmon.store.rekey"):
        assert writer.add(records) == 0  # sent again after the upgrade: stored once
    assert f"re-keyed {len(records)} records" in caplog.text
    progress = [m for m in caplog.messages if m.startswith("dsmon: re-keyed ")]
    assert progress[0] == f"dsmon: re-keyed 56 of {len(records)} records"
    assert len(progress) == len(records) // 56
    assert _version(store) == SCHEMA_VERSION
    stored = sql_rows(store, "SELECT key FROM records ORDER BY id")
    assert [bytes(row[0]) for row in stored] == [key_digest(r) for r in records]
    assert writer.records("z2") == records
    writer.close()


def test_a_body_that_does_not_decode_keeps_its_old_key(
    store: Store, z2_log_records: list[Record], caplog: pytest.LogCaptureFixture
) -> None:
    records = z2_log_records[:20]
    _make_version_1(store, records)
    sql_rows(store, "UPDATE records SET body = ? WHERE id = (SELECT MIN(id) FROM records)",
         [("{not json",)])  # fmt: skip
    writer = _reopen(store)
    with caplog.at_level(logging.INFO, logger="dsmon.store.rekey"):
        assert writer.add(records[1:]) == 0
    assert "kept the old key of 1 records" in caplog.text
    first = sql_rows(store, "SELECT key FROM records ORDER BY id LIMIT 1")[0][0]
    assert bytes(first) == _v1_key(records[0])
    writer.close()


def test_prepare_writes_rekeys_before_any_write(store: Store, z2_log_records: list[Record]) -> None:
    _make_version_1(store, z2_log_records)
    writer = _reopen(store)
    writer.prepare_writes()
    assert _version(store) == SCHEMA_VERSION
    first = sql_rows(store, "SELECT key FROM records ORDER BY id LIMIT 1")[0][0]
    assert bytes(first) == key_digest(z2_log_records[0])
    writer.prepare_writes()  # once is enough: the second finds nothing to do
    assert writer.add(z2_log_records) == 0
    writer.close()


def test_ingest_server_upgrades_a_store_before_it_listens(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    store = SQLiteStore(tmp_path / "old.sqlite")
    _make_version_1(store, z2_log_records)
    store.close()
    with start_ingest_server(str(tmp_path / "old.sqlite"), "t" * 32, port=0):
        assert sqlite_sql(tmp_path / "old.sqlite", "PRAGMA user_version") == [(SCHEMA_VERSION,)]
