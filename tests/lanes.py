"""What the fast lane (``pytest -m "not slow"``) runs of the heavier tests.

The fast lane is the edit-test loop: each behaviour once, on small input. The full suite (CI,
the README's command) runs every case. tests/system/ (real processes, all ``slow``) is not
even collected in the fast lane (``conftest.pytest_ignore_collect``). Four ways to keep a test's case out of the loop:

- ``first_fast``: a test parametrized over several real runs of tests/data checks the same
  code on each; the fast lane keeps the first, every other is marked ``slow``.
- ``examples``: a property test's Hypothesis examples; the fast lane draws an eighth of them
  (new ones on every developer run, so bugs are still found over time).
- ``sample``: a sweep over every corpus file inside one test; the fast lane reads every
  fourth file. ``sampled`` is the same for a test parametrized over the files: every fourth
  case runs in the fast lane, the others are marked ``slow``.
- ``head``: a real run fed to the dashboard's frames a few records at a time, with a check
  after every refresh; the fast lane feeds its first :data:`LIVE_RECORDS` (a shorter real run,
  still many pages and refreshes), the full suite all of it.

And one rule for a whole kind of case (:func:`on_second_backend`): a test that takes the
``store`` fixture (or another store of every backend) runs on SQLite in the fast lane, on PostgreSQL too in the full suite. The
fast lane still runs PostgreSQL where it is the subject (tests/unit/store/test_store_pg.py:
its SQL, types, reconnects, concurrent writers), when ``$DSMON_TEST_PG_URL`` names a server.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: True when this run leaves out the slow tests (a mark expression with "not slow").
FAST = False


def first_fast(values: Iterable[Any]) -> list[Any]:
    """``values`` as parameters: the first as it is, every other marked ``slow``. A tuple is
    one case of several arguments, as ``parametrize`` takes it."""
    slow = pytest.mark.slow
    return [
        v
        if i == 0
        else (pytest.param(*v, marks=slow) if isinstance(v, tuple) else pytest.param(v, marks=slow))
        for i, v in enumerate(values)
    ]


def sampled(values: Sequence[Any], every: int = 4) -> list[Any]:
    """``values`` as parameters: every ``every``-th, from the first, as it is; the others
    marked ``slow`` (the parametrized form of :func:`sample`)."""
    slow = pytest.mark.slow
    return [v if i % every == 0 else pytest.param(v, marks=slow) for i, v in enumerate(values)]


def examples(full: int) -> int:
    """A property test's number of examples: ``full`` in the full suite, an eighth (at
    least 10) in the fast lane."""
    return max(10, full // 8) if FAST else full


def sample(items: Sequence[T], every: int = 4) -> Sequence[T]:
    """``items`` in the full suite; every ``every``-th of them, from the first, in the fast lane."""
    return items[::every] if FAST else items


def on_second_backend(item: pytest.Item) -> bool:
    """Whether ``item`` is the PostgreSQL case of a test taking a store fixture of every
    backend (``store``, or a module's own, named ``*_store``, made from ``STORE_BACKENDS``)."""
    spec = getattr(item, "callspec", None)
    params = spec.params if spec is not None else {}
    return any(n.endswith("store") and v == "postgresql" for n, v in params.items())


#: How many of a real run's first records the fast lane feeds live (:func:`head`): for the ZeRO-2
#: run, 11 steps, 30 timer lines, 3 step lines (70 before: 18 steps; the runs' checks were
#: the same, at a third more of the view tests' time).
LIVE_RECORDS = 48


def head(items: Sequence[T], fast: int) -> Sequence[T]:
    """``items`` in the full suite; its first ``fast`` in the fast lane."""
    return items[:fast] if FAST else items
