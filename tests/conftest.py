"""Shared fixtures: a store of every backend, and real DeepSpeed runs from tests/data/.

Tests live by what they exercise: ``tests/unit/<package>/`` for one package of the code
(``dsmon.parse`` -> ``unit/parse``, ``collectors`` -> ``unit/collectors``, the dashboard's
pages -> ``unit/app``), ``tests/system/`` for real processes, a real browser and real
DeepSpeed jobs (every test there is marked ``slow``), ``tests/meta/`` for the checks of the
repository itself (layering, docs, README, lint). Helpers shared by several test modules sit
in ``tests/`` beside this file.

``store`` is parametrized by backend, so every store test runs against each one. A backend
that cannot run here (no server) is skipped by its opener, not failed.
"""

# ruff: noqa: E402  (the bytecode switch below comes before every other import)
from __future__ import annotations

import sys

# Keep compiled test modules (and their rewritten asserts) between runs even where the shell
# sets PYTHONDONTWRITEBYTECODE: without them every run compiles and rewrites ~300 modules
# again, several seconds of each worker's start. __pycache__ is ignored by git.
sys.dont_write_bytecode = False

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import deepspeed_support
import lanes
import pytest
from hypothesis import settings as hypothesis_settings
from locations import DATA, TESTS
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


#: Every test under tests/system/ runs real processes: the fast lane leaves them out.
SYSTEM = TESTS / "system"


def pytest_configure(config: pytest.Config) -> None:
    """Tell ``lanes`` whether this run is the fast lane, before any test module is imported
    (their decorators ask it how many examples to draw)."""
    lanes.FAST = "not slow" in (config.getoption("markexpr") or "")
    _check_grouping(config)


def _check_grouping(config: pytest.Config) -> None:
    """Refuse to run where pytest-xdist cannot group: the slow tests would race each other.

    ``--dist loadgroup`` puts every test of one ``xdist_group`` on one worker by adding
    ``@group`` to its id; pytest 9.2 keeps ids where pytest-xdist 3.8 cannot change them, and
    then nothing is grouped, silently (pytest-dev/pytest-xdist#1386).
    """
    import xdist

    if config.getoption("dist", None) != "loadgroup":
        return
    pytest_version = tuple(int(p) for p in pytest.__version__.split(".")[:2])
    xdist_version = tuple(int(p) for p in xdist.__version__.split(".")[:2])
    if pytest_version >= (9, 2) and xdist_version <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} does not group "
            "the slow tests (pytest-dev/pytest-xdist#1386): install the test extra's versions "
            "(pip install -e '.[all,test]')"
        )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast lane does not even import tests/system/: every test there is slow, and its
    modules import a browser driver and the whole dashboard in every worker."""
    if lanes.FAST and (collection_path == SYSTEM or SYSTEM in collection_path.parents):
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test of tests/system/ ``slow``, and the PostgreSQL case of each test taking
    the ``store`` fixture (:func:`lanes.on_second_backend`); run every slow test on one worker,
    in turn.

    The suite runs on every core (pytest-xdist, ``-n auto`` in pyproject.toml), which is what
    keeps the fast lane near a minute and a half on two cores. Slow tests start real processes (a
    dashboard, collectors, a browser, DeepSpeed jobs) whose deadlines assume they do not race
    each other, so they share one group (``--dist loadgroup``) and run one after another.
    """
    for item in items:
        if SYSTEM in item.path.parents or lanes.on_second_backend(item):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group("slow"))
