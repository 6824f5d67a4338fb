"""Helpers for tests that start dsmon (or a training job) as real processes."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable


def free_port() -> int:
    """A TCP port nothing listens on now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ui_healthy(port: int) -> bool:
    """Whether a Streamlit server answers its health check on 127.0.0.1:port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as r:
            return bool(r.read() == b"ok")
    except OSError:
        return False


def wait_for(
    what: str,
    cond: Callable[[], object],
    procs: list[subprocess.Popen[bytes]],
    deadline_s: float,
    poll_s: float = 0.2,
) -> None:
    """Until ``cond()`` holds; fails at once if one of ``procs`` exits, or at the deadline."""
    deadline = time.monotonic() + deadline_s
    while not cond():
        for p in procs:
            assert p.poll() is None, f"{p.args!r} exited {p.returncode} before {what}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(poll_s)
