"""Headless Debian Chromium through Playwright, shared by the browser tests.

No ``playwright install``: the system browser is used. Without it the tests are skipped,
unless ``DSMON_REQUIRE_BROWSER=1`` (CI) makes its absence a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dsmon dashboard exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"dashboard not healthy after 90 s:\n{log.read_text()}")


@contextmanager
def dashboard_server(store: str, log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``dsmon dashboard`` (the UI alone) on ``store`` at a free loopback port: its URL."""
    exe = Path(sys.executable).parent / "dsmon"
    cmd = [
        str(exe),
        "dashboard",
        "--store",
        store,
        "--port",
        str(_free_port()),
        "--address",
        "127.0.0.1",
        "--no-browser",
        "--no-ingest",  # the UI alone: no ingest port to collide with
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    url = f"http://127.0.0.1:{cmd[5]}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_idle(page: Any) -> None:
    """Until the app is connected and no script run is in progress."""
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-connection-state="CONNECTED"][data-test-script-state="notRunning"]',
        timeout=60_000,
    )


def chart_bars(page: Any) -> int:
    """Bars drawn in the first trace of the page's first chart (Steps: the per-step breakdown).

    What the browser drew, not what the server sent: a chart that kept its first figure
    while the page's text moved on is caught here.
    """
    page.wait_for_selector(".js-plotly-plot .trace.bars .point", timeout=30_000)
    return int(
        page.locator(".js-plotly-plot").first.locator(".trace.bars").first.locator(".point").count()
    )
