"""Headless Debian Chromium through Playwright, shared by the browser tests.

No ``playwright install``: the system browser is used. Without it the tests are skipped,
unless ``DSMON_REQUIRE_BROWSER=1`` (CI) makes its absence a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("DSMON_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing(reason: str) -> None:
    """Skip, or fail where the browser is required."""
    if os.environ.get("DSMON_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required but {reason}")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright browser on Debian's chromium."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is not installed (pip install playwright)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def page_text(page: Any) -> str:
    """The visible text of the Streamlit page's main area and sidebar."""
    return str(page.evaluate("document.body.innerText"))
