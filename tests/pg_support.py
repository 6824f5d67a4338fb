"""PostgreSQL for the tests: the server ``scripts/start-postgres.sh`` started, one schema per store.

The server's URL comes from ``DSMON_TEST_PG_URL``. Without it the PostgreSQL tests are
skipped on a developer's machine; in CI (``CI`` set) they must run, so the first one starts
a server with the script (installing Debian's package if needed) and fails if that fails:
a silent skip would hide that the backend went untested.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest

from dsmon.store.postgres import PostgresBackend
from dsmon.store.store import Store

PG_URL_ENV = "DSMON_TEST_PG_URL"
START_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "start-postgres.sh"
_CI_SERVER: dict[str, str] = {}  # "url" once started, "error" if starting failed


def pg_url() -> str:
    """The test server's URL; skips without one, except in CI, which starts one (or fails)."""
    url = os.environ.get(PG_URL_ENV)
    if url:
        return url
    if not os.environ.get("CI"):
        pytest.skip(f'no PostgreSQL: set ${PG_URL_ENV} (eval "$(scripts/start-postgres.sh)")')
    return _start_for_ci()


def _start_for_ci() -> str:
    """Start the server with scripts/start-postgres.sh once per session; stop it at exit.

    A fallback for a CI script that did not export ${PG_URL_ENV} itself: in CI the
    PostgreSQL tests must run, never skip.
    """
    if "error" in _CI_SERVER:
        pytest.fail(_CI_SERVER["error"])
    if "url" not in _CI_SERVER:
        res = subprocess.run(
            ["bash", str(START_SCRIPT)], capture_output=True, text=True, timeout=900
        )
        exports = dict(re.findall(r"^export (\w+)=(\S+)$", res.stdout, re.MULTILINE))
        if res.returncode != 0 or PG_URL_ENV not in exports:
            _CI_SERVER["error"] = (
                f"CI: {START_SCRIPT.name} failed ({res.returncode}): {res.stderr[-3000:]}"
            )
            pytest.fail(_CI_SERVER["error"])
        os.environ.update(exports)  # child processes (dsmon serve) see it too
        stop = ["bash", str(START_SCRIPT), "--stop", exports["DSMON_TEST_PG_DIR"]]
        atexit.register(subprocess.run, stop, capture_output=True, timeout=120)
        _CI_SERVER["url"] = exports[PG_URL_ENV]
    return _CI_SERVER["url"]


def with_search_path(url: str, schema: str) -> str:
    """``url`` with libpq ``options`` putting ``schema`` first on the search path."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}"


def create_schema() -> tuple[str, str]:
    """A new empty schema; returns (its name, a URL whose tables go into it)."""
    base = pg_url()
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return name, with_search_path(base, name)


def drop_schema(name: str) -> None:
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


class ThrowawayPgStore(Store):
    """A PostgreSQL store in its own schema, which closing the store drops."""

    def __init__(self) -> None:
        self.schema, url = create_schema()
        super().__init__(PostgresBackend(url))

    def close(self) -> None:
        super().close()
        drop_schema(self.schema)


def open_pg_store(tmp_path: Path) -> ThrowawayPgStore:
    """Opener for the ``store`` fixture (``tmp_path`` is unused: the data is in the server)."""
    del tmp_path
    return ThrowawayPgStore()
