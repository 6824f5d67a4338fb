"""Every command that serves the dashboard, from a fresh ``HOME`` with no terminal.

Streamlit asks for an e-mail address on its first non-headless start on a machine (no
``~/.streamlit/credentials.toml``): with no terminal it exits 255, in one it waits at the
prompt. Users start dsmon from nohup, systemd, CI jobs and containers, so each command runs
here in a new session (no controlling terminal), stdin closed, ``HOME`` an empty folder, and
*without* ``--no-browser``: the dashboard must answer, and the browser must be opened by
dsmon (``$BROWSER`` is a script that writes down the URL it is given). Without a browser to
show (no display, no ``$BROWSER``) nothing is opened and the dashboard serves all the same.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from locations import DATA
from process_support import free_port, ui_healthy

pytestmark = pytest.mark.slow

DEADLINE_S = 90.0


def fresh_env(home: Path, browser: Path | None) -> dict[str, str]:
    """A login's environment on a new machine: new HOME, no display, no dsmon settings."""
    drop = ("DSMON_", "STREAMLIT_", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "XDG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["HOME"] = str(home)
    env.pop("TERM", None)
    if browser is not None:
        env["BROWSER"] = str(browser)
    return env


def recording_browser(tmp: Path) -> tuple[Path, Path]:
    """A ``$BROWSER`` program that appends the URL it is asked to open to a file."""
    seen = tmp / "opened.txt"
    script = tmp / "browser.sh"
    script.write_text(f'#!/bin/sh\necho "$1" >> "{seen}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, seen


def start(tmp: Path, args: list[str], browser: Path | None) -> tuple[subprocess.Popen[bytes], Path]:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    out = tmp / "out.txt"
    with out.open("wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=tmp,
            env=fresh_env(home, browser),
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no controlling terminal, as under nohup or systemd
        )
    return proc, out


def wait(proc: subprocess.Popen[bytes], out: Path, what: str, cond: object) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():  # type: ignore[operator]
        text = out.read_text(errors="replace")
        assert proc.poll() is None, f"exited {proc.returncode} before {what}:\n{text}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}:\n{text}"
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is not None:
        return proc.returncode
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def commands(tmp: Path, port: int) -> dict[str, list[str]]:
    log = tmp / "run1" / "train.log"
    log.parent.mkdir()
    log.write_bytes((DATA / "z2" / "train.log").read_bytes())
    return {
        "demo": ["demo", "--port", str(port), "--speed", "5"],
        "dashboard": [
            "dashboard", "--store", str(tmp / "s.sqlite"), "--port", str(port),
            "--ingest-port", str(free_port()),
        ],
        "watch": ["watch", str(log), "--port", str(port), "--store", str(tmp / "w.sqlite")],
        "dashboard --no-ingest": [
            "dashboard", "--no-ingest", "--store", str(tmp / "s.sqlite"), "--port", str(port),
        ],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["demo", "dashboard", "watch", "dashboard --no-ingest"])
def test_serves_and_opens_the_browser_from_a_fresh_home_without_a_terminal(
    tmp_path: Path, command: str
) -> None:
    port = free_port()
    browser, seen = recording_browser(tmp_path)
    proc, out = start(tmp_path, commands(tmp_path, port)[command], browser)
    try:
        wait(proc, out, "the dashboard", lambda: ui_healthy(port))
        wait(proc, out, "the browser", lambda: seen.exists() and seen.read_text().endswith("\n"))
        assert seen.read_text().split() == [f"http://127.0.0.1:{port}"]
        assert not (tmp_path / "home" / ".streamlit" / "credentials.toml").exists()
    finally:
        status = stop(proc)
    assert status in (0, 130), out.read_text(errors="replace")


def test_no_browser_is_opened_where_none_can_be_shown(tmp_path: Path) -> None:
    port = free_port()
    proc, out = start(tmp_path, commands(tmp_path, port)["dashboard"], None)
    try:
        wait(proc, out, "the dashboard", lambda: ui_healthy(port))
        time.sleep(1.0)
        assert proc.poll() is None
    finally:
        status = stop(proc)
    assert status in (0, 130), out.read_text(errors="replace")


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["parse", "{log}"],
        ["import", "{log}", "--store", "{tmp}/i.sqlite"],
        ["check", "{log}"],
        ["demo", "--summary-only", "--store", "{tmp}/d.sqlite"],
    ],
    ids=lambda a: a[0],
)
def test_one_shot_commands_from_a_fresh_home_without_a_terminal(
    tmp_path: Path, args: list[str]
) -> None:
    log = tmp_path / "run1" / "train.log"
    log.parent.mkdir()
    log.write_bytes((DATA / "z2" / "train.log").read_bytes())
    argv = [a.format(log=log, tmp=tmp_path) for a in args]
    proc, out = start(tmp_path, argv, None)
    try:
        status = proc.wait(timeout=120)
    finally:
        stop(proc)
    text = out.read_text(errors="replace")
    assert status in (0, 1), text  # `check` exits 1 when it warns; never a crash or a prompt
    assert "Traceback" not in text and text.strip(), text
