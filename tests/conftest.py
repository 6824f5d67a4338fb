"""The suite's hooks: which lane runs (``lanes``), which tests are slow and run in turn, and
where the shared fixtures load.

Tests live by what they exercise: ``tests/unit/<package>/`` for one package of the code
(``dsmon.parse`` -> ``unit/parse``, ``collectors`` -> ``unit/collectors``, the dashboard's
pages -> ``unit/app``), ``tests/system/`` for real processes, a real browser and real
DeepSpeed jobs (every test there is marked ``slow``), ``tests/meta/`` for the checks of the
repository itself (layering, docs, README, lint). Helpers shared by several test modules sit
in ``tests/`` beside this file; the fixtures most tests share are in :mod:`shared_fixtures`.

This module imports no part of dsmon: pytest-xdist's controller loads it before it starts the
workers, and runs no test.
"""

# ruff: noqa: E402  (the bytecode switch below comes before every other import)
from __future__ import annotations

import gc
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

# Keep compiled test modules (and their rewritten asserts) between runs even where the shell
# sets PYTHONDONTWRITEBYTECODE: without them every run compiles and rewrites ~300 modules
# again, several seconds of each worker's start. __pycache__ is ignored by git.
sys.dont_write_bytecode = False

from pathlib import Path

import lanes
import pytest
from locations import SYSTEM

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler import Scheduling


@pytest.hookimpl(tryfirst=True)  # before pytest's own: its temporary folders read basetemp
def pytest_configure(config: pytest.Config) -> None:
    """Set the run up, before any test module is imported.

    - ``lanes`` learns whether this run is the fast lane (test decorators ask it how many
      examples to draw);
    - a run xdist cannot group is refused (:func:`_check_grouping`);
    - the fast lane's temporary folders go on a memory file system (:func:`_memory_basetemp`);
    - where tests run (not xdist's controller), the shared fixtures load and a whole-frame
      read becomes an error.
    """
    lanes.FAST = "not slow" in (config.getoption("markexpr") or "")
    _check_grouping(config)
    if lanes.FAST and not _is_worker(config) and config.option.basetemp is None:
        config.option.basetemp = _memory_basetemp()
    if not _is_controller(config):
        config.pluginmanager.import_plugin("shared_fixtures")
        # A page reading a long run's whole frame live instead of a fold is a bug
        # (dsmon.view.cache): an error in every test. Set here, not in pyproject.toml, where
        # resolving the warning's class would import dsmon (and pandas) in the controller.
        config.addinivalue_line("filterwarnings", "error::dsmon.view.cache.WholeFrameRead")


#: Where the fast lane's temporary folders go when it can: a memory file system.
MEMORY_FS = Path("/dev/shm")
#: Room the fast lane wants there (its folders take a few tens of MB).
MEMORY_FS_ROOM_BYTES = 2 << 30


def _memory_basetemp() -> str | None:
    """A fresh folder on :data:`MEMORY_FS` for the fast lane's ``tmp_path``, or None.

    The fast lane's stores are real SQLite files; closing one syncs it to disk four times (a
    WAL checkpoint), and the lane closes hundreds: about 2 ms each of waiting, in which a
    worker's core sits idle. On a memory file system a sync returns at once; nothing else
    differs (files, renames, holes, inotify). The full suite keeps the system's temporary
    folder. None (pytest's default) where there is no such file system or too little room.
    """
    try:
        if shutil.disk_usage(MEMORY_FS).free < MEMORY_FS_ROOM_BYTES:
            return None
        return tempfile.mkdtemp(prefix="dsmon-fast-lane-", dir=MEMORY_FS)
    except OSError:
        return None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the fast lane's folder on the memory file system (:func:`_memory_basetemp`)."""
    basetemp = config.option.basetemp
    if basetemp and not _is_worker(config) and Path(basetemp).parent == MEMORY_FS:
        shutil.rmtree(basetemp, ignore_errors=True)


def _is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (it runs tests the controller hands it)."""
    return hasattr(config, "workerinput")


def _is_controller(config: pytest.Config) -> bool:
    """Whether this process is pytest-xdist's controller, which only hands tests to workers."""
    return not _is_worker(config) and config.getoption("dist", "no") != "no"


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


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """The fast lane hands its tests out by work stealing; the full suite groups (None: the
    ``--dist`` named).

    ``--dist loadgroup`` sends each test alone and, before each, counts every test the
    worker was ever given: over the fast lane's 2,200 tests that took xdist's controller
    about 4 s of CPU beside the workers on two cores (3 s by work stealing, which hands each
    worker half the tests at once and moves some when one runs out). The fast lane has no
    slow tests to keep in turn; its one group, the layering checks, only saves parsing.
    """
    if not lanes.FAST or config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import WorkStealingScheduling  # only xdist's controller needs it

    return WorkStealingScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what collection made (pandas, Streamlit, plotly, hypothesis, every test module)
    out of Python's full garbage collections from here on, and collect young objects every
    10,000 allocations instead of 700.

    What collection made lives as long as the process, and each full collection walked all of
    it; tests make many short-lived frames and records. Collections took 5-6 s of each
    worker's fast lane, 3.2-3.5 s after (timed with ``gc.callbacks``, load 4-5). A test that
    needs garbage gone (a weak reference dropped, memory measured) calls ``gc.collect()``.
    """
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


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
    keeps the fast lane under a minute on two cores. Slow tests start real processes (a
    dashboard, collectors, a browser, DeepSpeed jobs) whose deadlines assume they do not race
    each other, so they share one group (``--dist loadgroup``) and run one after another.
    """
    for item in items:
        if SYSTEM in item.path.parents or lanes.on_second_backend(item):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group("slow"))
