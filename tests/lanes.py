"""Which cases of a parametrized test the fast lane runs.

A test run over several real runs of tests/data checks the same code on each; the fast lane
(``pytest -m "not slow"``) keeps the first, the full suite (CI) runs them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def first_fast(values: Iterable[Any]) -> list[Any]:
    """``values`` as parameters: the first as it is, every other marked ``slow``."""
    return [v if i == 0 else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]
