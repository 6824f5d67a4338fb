"""The fixtures and helpers most tests share: a store of every backend, real DeepSpeed runs from
tests/data/ read once per worker, and the checks around every test (ingest servers stopped,
DeepSpeed's leftovers freed).

A plugin that :mod:`conftest` loads in the processes that run tests (each pytest-xdist worker,
or the one process of ``-n0``), not in pytest-xdist's controller, which runs none: importing
the store, the parsers and pandas there held up the start of every worker by about a second.
Test modules import its helpers by name (``from shared_fixtures import read_log``).

``store`` is parametrized by backend, so every store test runs against each one. A backend
that cannot run here (no server) is skipped by its opener, not failed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import deepspeed_support
import pytest
from hypothesis import settings as hypothesis_settings
from locations import DATA, SYSTEM
from pg_support import open_pg_store
from server_support import finish_stops

from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import Record, record_key
from dsmon.parse.base import Diagnostics
from dsmon.store.store import Store, open_store

# Property tests explore new random inputs on every developer run (that is how they find
# bugs); in CI they replay one fixed sequence, so a submission is judged on the same examples
# each time and a new counterexample is found (and kept as a test) on a developer's machine.
hypothesis_settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")
#: The ZeRO-2 run of the corpus (DeepSpeed 0.19.8, 2 ranks, 30 steps): tests/data/z2/.
Z2 = DATA / "z2"


def _open_sqlite(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store.sqlite")


#: Backend name -> opener of an empty store of that backend.
STORE_BACKENDS: dict[str, Callable[[Path], Store]] = {
    "sqlite": _open_sqlite,
    "postgresql": open_pg_store,  # skipped without $DSMON_TEST_PG_URL, except in CI
}


@pytest.fixture(scope="session", autouse=True)
def servers_stopped() -> Iterator[None]:
    """Every ingest server a fixture stopped in the background has stopped, without error."""
    yield
    assert finish_stops() == []


@pytest.fixture(autouse=True)
def deepspeed_leftovers_released(request: pytest.FixtureRequest) -> Iterator[None]:
    """Around each test of tests/system/: no dead JIT build blocks its DeepSpeed jobs, and the
    shared memory they leave is freed after it (:mod:`deepspeed_support`)."""
    system = SYSTEM in Path(str(request.node.path)).parents
    if system:
        deepspeed_support.release_stale_build_locks()
    yield
    if system:
        deepspeed_support.release_shm()


@pytest.fixture(params=list(STORE_BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store of each backend."""
    s = STORE_BACKENDS[request.param](tmp_path)
    yield s
    s.close()


def read_log(path: Path, run: str) -> list[Record]:
    """The records of one log file (file name as the Source's file), a new list each call.

    Parsed once per worker: records are frozen, and many tests read the same real runs.
    """
    return list(_parsed(path, run))


@functools.cache
def _parsed(path: Path, run: str) -> tuple[Record, ...]:
    diag = Diagnostics()
    (found,) = discover(path)
    return tuple(read_found(found, run, diag))


@pytest.fixture(scope="session")
def z2_log_records() -> list[Record]:
    """Records of tests/data/z2/train.log, parsed once per session."""
    return read_log(Z2 / "train.log", "z2")


def settled(records: Iterable[Record]) -> list[Record]:
    """What a store keeps of a live stream: one record per identity key, in first-seen order.

    A live parser sends a record without its step when the log has not named one yet, and
    again with it later; the store fills the step in place and never erases one.
    """
    kept: dict[tuple[str, str, str, str, int, str], Record] = {}
    for rec in records:
        key = record_key(rec)
        old = kept.get(key)
        if old is None or (old.step is None and rec.step is not None):
            kept[key] = rec
    return list(kept.values())
