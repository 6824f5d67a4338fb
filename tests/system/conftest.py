"""Fixtures of the tests that run real processes (every test here is marked ``slow``)."""

from __future__ import annotations

from collections.abc import Iterator

import deepspeed_support
import pytest


@pytest.fixture(autouse=True)
def deepspeed_leftovers_released() -> Iterator[None]:
    """Before each test, no dead build blocks its jobs; after it, their shared memory is freed."""
    deepspeed_support.release_stale_build_locks()
    yield
    deepspeed_support.release_shm()
