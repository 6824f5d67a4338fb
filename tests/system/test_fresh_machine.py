"""The README's first command on a fresh machine: a clean clone, a new virtualenv, the demo.

A clone of this repository's HEAD (committed work only) goes into a temporary folder, and
the README's first line runs there exactly as written, plus ``--port`` (a free one, so a
dashboard already running here does not collide), from a new ``HOME`` with no terminal and
no display (as from nohup, a container or CI: Streamlit must not ask anything). The test waits for
the dashboard to answer and for the demo's summary (printed when its live replay of the
bundled run ends, about 30 s at one step per second), then presses Ctrl-C (SIGINT to the
process group) and expects it to stop. The second command (install the test extra, run the
suite) would run this test again inside itself, so it is only checked for form.

Slow (a full ``pip install`` into a new venv), and run by ``.ci/run`` like every test.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from browser_support import chromium, page_text
from locations import ROOT

pytestmark = pytest.mark.slow

#: The whole install and import, generously: pip may build or fetch every dependency.
INSTALL_TIMEOUT_S = 1200


def readme_commands(readme: Path) -> list[str]:
    """The lines of the code block that opens the README."""
    m = re.match(
        r"# dsmon\n\n```(?:sh|bash)\n(.*?)\n```\n", readme.read_text(encoding="utf-8"), re.DOTALL
    )
    assert m, f"{readme} must begin with its title and then the code block of commands"
    return m.group(1).splitlines()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(home: Path) -> dict[str, str]:
    """The environment of a new shell: no venv of ours on PATH, no dsmon settings."""
    ours = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != ours)
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DSMON_", "STREAMLIT_"))}
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "XDG_STATE_HOME", "DISPLAY", "BROWSER"):
        keep.pop(k, None)
    (home / "home").mkdir(exist_ok=True)
    return {**keep, "PATH": path, "XDG_STATE_HOME": str(home / "state"), "HOME": str(home / "home")}


class Output:
    """A child's stdout, collected by a thread so the test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, ready: Callable[[], bool], timeout_s: float) -> None:
        """Wait until ``ready()``; fail with the output if the child ends or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self._proc.poll() is not None:
                self._thread.join(5)
                pytest.fail(f"exited {self._proc.returncode} before it was ready:\n{self.text}")
            if time.monotonic() > deadline:
                pytest.fail(f"not ready after {timeout_s:.0f} s:\n{self.text[-4000:]}")
            time.sleep(0.5)


def dashboard_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return bool(r.status == 200 and r.read().strip() == b"ok")
    except OSError:
        return False


def stop(proc: subprocess.Popen[str], sig: int) -> int | None:
    """Signal the process group (as Ctrl-C does); the exit status, or None if it hung."""
    try:
        os.killpg(proc.pid, sig)
        return proc.wait(timeout=60)
    except ProcessLookupError:
        return proc.wait()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("fresh") / "dsmon"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True, timeout=300)
    assert not (dest / ".venv").exists()
    return dest


def test_readme_first_command_installs_and_runs_the_demo(clone: Path) -> None:
    demo_cmd = readme_commands(clone / "README.md")[0]
    port = free_port()
    proc = subprocess.Popen(
        ["bash", "-c", f"{demo_cmd} --port {port}"],
        cwd=clone,
        env=clean_env(clone.parent),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so Ctrl-C reaches pip or Streamlit
    )
    out = Output(proc)
    try:
        out.wait_for(
            lambda: (
                dashboard_healthy(port) and re.search(r"^Steps\s+30\b", out.text, re.M) is not None
            ),
            INSTALL_TIMEOUT_S,
        )
        opened_by_url = steps_page_text(port)
    finally:
        status = stop(proc, signal.SIGINT)
    assert status is not None, f"Ctrl-C did not stop the demo:\n{out.text[-4000:]}"
    # The bundled run was replayed into the default demo store and summarised.
    assert (clone / ".venv" / "bin" / "dsmon").is_file()
    assert (clone / "dsmon-demo.sqlite").is_file()
    assert re.search(r"^Run\s+demo$", out.text, re.MULTILINE), out.text[-4000:]
    assert re.search(r"^DeepSpeed\s+0\.19\.8, world size 2$", out.text, re.MULTILINE)
    assert re.search(r"^Steps\s+30\b", out.text, re.MULTILINE)
    assert f"http://127.0.0.1:{port}" in out.text
    # A page opened by its URL in a fresh browser, from the installed layout (app.py and
    # pages/ under <venv>/share/dsmon, the ui package in site-packages).
    assert "Steps · demo" in opened_by_url and "30 timed steps" in opened_by_url, opened_by_url


def steps_page_text(port: int) -> str:
    """The text of the Steps page, opened by its URL before any other page."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/steps")
        page.wait_for_function("document.body.innerText.includes('timed steps')", timeout=60_000)
        return page_text(page)


def test_readme_second_command_is_well_formed(clone: Path) -> None:
    test_cmd = readme_commands(clone / "README.md")[1]
    assert subprocess.run(["bash", "-n", "-c", test_cmd]).returncode == 0
    steps = [shlex.split(part) for part in test_cmd.split(" && ")]
    assert steps == [
        ["python3.11", "-m", "venv", ".venv"],
        [".venv/bin/pip", "install", "-e", ".[all,test]"],
        [".venv/bin/pytest"],
    ]
    # What it installs and runs is in the clone: the test extra and the suite's config.
    pyproject = (clone / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r"^test = \[", pyproject, re.MULTILINE)
    assert '[tool.pytest.ini_options]\ntestpaths = ["tests"]' in pyproject
