"""A store notes its schema version and maker; one of another schema is refused in one line.

dsmon has had no release: a store an older (or newer) dsmon wrote is never migrated. Opening
it, on either backend and from any command, says in one line who made it, which schema it
has and what to do (re-import the logs), and leaves it as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_support import ThrowawayPgStore
from sql_support import pg_sql, sqlite_sql, store_sql

from cli.main import main
from dsmon import __version__
from dsmon.serve.run import start_ingest_server
from dsmon.store.errors import StoreError
from dsmon.store.schema import SCHEMA_VERSION
from dsmon.store.store import Store, open_store
from dsmon.store.url import redact_url


def _meta(store: Store) -> dict[str, str]:
    """The store's ``dsmon_meta`` rows, read past the Store interface."""
    return {str(k): str(v) for k, v in store_sql(store, "SELECT name, value FROM dsmon_meta")}


def test_a_new_store_notes_its_schema_and_the_dsmon_that_made_it(store: Store) -> None:
    assert _meta(store) == {"schema_version": str(SCHEMA_VERSION), "dsmon_version": __version__}
    if store.backend.dialect.name == "sqlite":  # read first, before any table
        assert sqlite_sql(store.url, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    with open_store(store.url) as again:  # opened again: the same store, nothing refused
        assert again.runs() == []
    assert _meta(store)["dsmon_version"] == __version__


def _line(where: str, schema: object, maker: str) -> str:
    return (
        f"cannot open store {where}: made by {maker} with store schema {schema}; "
        f"this dsmon writes schema {SCHEMA_VERSION}: re-import the logs with `dsmon import`"
    )


def older_sqlite(path: Path) -> Path:
    """A SQLite store as a dsmon of schema 2 left it: its tables, version 2, no maker noted."""
    open_store(path).close()
    sqlite_sql(path, "DROP TABLE dsmon_meta")
    sqlite_sql(path, "PRAGMA user_version = 2")
    return path


def test_a_sqlite_store_of_an_older_schema_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = older_sqlite(tmp_path / "runs.sqlite")
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        open_store(path)
    assert str(err.value) == _line(str(path), 2, "an earlier dsmon")
    assert path.read_bytes() == before
    assert sqlite_sql(path, "PRAGMA user_version") == [(2,)]


def test_a_store_of_another_schema_names_the_dsmon_that_made_it(tmp_path: Path) -> None:
    """A store a later dsmon made (a schema after this one) says which dsmon that was."""
    path = tmp_path / "newer.sqlite"
    open_store(path).close()
    sqlite_sql(path, "UPDATE dsmon_meta SET value = '0.9.0' WHERE name = 'dsmon_version'")
    sqlite_sql(path, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError) as err:
        open_store(f"sqlite:///{path}")
    assert str(err.value) == _line(str(path), SCHEMA_VERSION + 1, "dsmon 0.9.0")


@pytest.fixture
def pg_store() -> Iterator[ThrowawayPgStore]:
    store = ThrowawayPgStore()
    yield store
    store.close()


def test_a_postgresql_store_of_another_schema_is_refused(pg_store: ThrowawayPgStore) -> None:
    url = pg_store.url
    pg_sql(url, "UPDATE dsmon_meta SET value = '2' WHERE name = 'schema_version'")
    pg_sql(url, "DELETE FROM dsmon_meta WHERE name = 'dsmon_version'")
    with pytest.raises(StoreError) as err:
        open_store(url)
    assert str(err.value) == _line(redact_url(url), 2, "an earlier dsmon")
    pg_sql(url, "INSERT INTO dsmon_meta VALUES ('dsmon_version', '0.9.0')")
    later = SCHEMA_VERSION + 1
    pg_sql(url, f"UPDATE dsmon_meta SET value = '{later}' WHERE name = 'schema_version'")
    with pytest.raises(StoreError) as err:
        open_store(url)
    assert str(err.value) == _line(redact_url(url), later, "dsmon 0.9.0")
    assert pg_sql(url, "SELECT value FROM dsmon_meta WHERE name = 'schema_version'") == [
        (str(later),)
    ]


def test_commands_print_the_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``dsmon export`` says it and exits 1; ``dsmon check --store`` says it as unreadable."""
    path = older_sqlite(tmp_path / "runs.sqlite")
    line = _line(str(path), 2, "an earlier dsmon")
    assert main(["export", "r", "--store", str(path)]) == 1
    assert capsys.readouterr().err == f"dsmon: {line}\n"
    assert main(["check", "--store", str(path)]) != 0
    assert capsys.readouterr().err == f"dsmon: cannot read {path}: {line}\n"


def test_the_ingest_server_does_not_start_on_it(tmp_path: Path) -> None:
    path = older_sqlite(tmp_path / "runs.sqlite")
    with pytest.raises(StoreError, match="made by an earlier dsmon with store schema 2"):
        start_ingest_server(str(path), "t" * 32, port=0)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
