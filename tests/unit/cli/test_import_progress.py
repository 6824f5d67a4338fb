"""``dsmon import`` draws a byte-count progress bar on a terminal, and none without one.

Both cases run the real command in a child process: once with stderr on a pseudo-terminal
(what a user at a shell sees), once with stderr on a pipe (CI, ``nohup``, a redirect).
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from shared_fixtures import Z2

#: Each test runs a whole `dsmon import` in a child process.
pytestmark = pytest.mark.slow

LOG = Z2 / "train.log"


def run_import(tmp_path: Path, stderr: int) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "cli.main", "import", str(LOG), "--store", str(tmp_path / "s")]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, timeout=120)


def read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed its end
            return out
        if not chunk:
            return out
        out += chunk


def test_terminal_gets_a_bar_that_reaches_the_log_size(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    # a terminal window of 24 x 100 (a fresh pseudo-terminal has none: tqdm draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        res = run_import(tmp_path, follower)
        os.close(follower)
        drawn = read_all(leader).decode()
    finally:
        os.close(leader)
    assert res.returncode == 0
    size = LOG.stat().st_size  # 37,210 bytes: tqdm prints 37.2k
    assert f"{size / 1000:.1f}k" in drawn
    final = [part for part in drawn.split("\r") if part.strip()][-1]  # the last redraw
    assert final.startswith("import: 100%|")
    assert f"{size / 1000:.1f}k/{size / 1000:.1f}k" in final
    assert b"Imported    " in res.stdout  # the summary still goes to stdout


def test_no_terminal_no_bar(tmp_path: Path) -> None:
    res = run_import(tmp_path, subprocess.PIPE)
    assert res.returncode == 0
    assert res.stderr == b""
    assert res.stdout.decode().splitlines()[:2] == [
        f"Store       {tmp_path / 's'}",
        "Imported    118 records (118 new) from 1 file(s)",  # as test_export: 119 with ds_config
    ]
