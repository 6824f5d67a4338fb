"""Fixtures of the tests that run real processes (every test here is marked ``slow``)."""

from __future__ import annotations

from collections.abc import Iterator

import deepspeed_support
import pytest


@pytest.fixture(autouse=True)
def deepspeed_shm_released() -> Iterator[None]:
    """After each test, the shared memory its DeepSpeed jobs left behind is given back."""
    yield
    deepspeed_support.release_shm()
