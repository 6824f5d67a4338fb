"""A dashboard keeps working when dsmon is reinstalled under it (issue 41, case 8).

The README's second line (``pip install -e '.[all,test]'``), run in the virtualenv of its
first while the demo's dashboard still ran, uninstalled the wheel: pip deleted
``<venv>/share/dsmon`` (``app.py``, ``pages/``), the Streamlit child's script and folder, and
the installed ``dsmon`` and ``ui`` packages. Every new browser session was a grey skeleton and
the log filled with tracebacks. Here an install is a folder holding what pip puts on the path
(``app.py`` beside the packages, as a checkout has them); the dashboard is started from it as
a user starts it, the folder is deleted as pip deletes it, and a new browser session must
draw every page, including pages whose modules were never imported before the deletion.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import _free_port, _wait_healthy, chromium, wait_idle
from locations import DATA, ROOT

from dsmon.load.files import import_paths
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

INSTALLED = ("app.py", "pages", ".streamlit", "dsmon", "ui", "cli", "collectors")


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """``dsmon dashboard`` run from a copy of the install: its URL, the copy, the cache."""
    install = tmp_path / "install"
    for name in INSTALLED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, install / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            install.mkdir(exist_ok=True)
            shutil.copy2(source, install / name)
    store = tmp_path / "store.sqlite"
    with open_store(store) as s:
        import_paths(s, [DATA / "z2"])
    port = _free_port()
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(install), "XDG_CACHE_HOME": str(cache)}
    log = tmp_path / "dashboard.log"
    cmd = [
        sys.executable, "-m", "cli.main", "dashboard", "--store", str(store), "--port", str(port),
        "--address", "127.0.0.1", "--no-browser", "--no-ingest",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url, install, cache
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def open_page(browser: Any, url: str, heading: str) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # a new session
    page.goto(url)
    page.get_by_role("heading", name=heading).wait_for(timeout=60_000)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0, url
    page.close()


def test_a_dashboard_outlives_the_files_it_was_started_from(
    installed: tuple[str, Path, Path],
) -> None:
    url, install, cache = installed
    with chromium() as browser:
        open_page(browser, f"{url}/?run=z2", "Health · z2")
        shutil.rmtree(install)  # pip uninstall, under the running dashboard
        open_page(browser, f"{url}/?run=z2", "Health · z2")
        for slug, title in (("steps", "Steps"), ("flops", "FLOPS"), ("gpus", "GPUs")):
            open_page(browser, f"{url}/{slug}?run=z2", f"{title} · z2")
    (copy,) = (cache / "dsmon" / "dashboard").iterdir()  # the dashboard's own copy
    assert (copy / "app.py").is_file() and (copy / "dsmon" / "parse" / "log.py").is_file()
    assert (copy / "dsmon" / "data" / "ds_config" / "releases.json").is_file()  # rules read it
