"""Supervision of child processes: stop them, wait for a signal or their end, report status.

``dsmon dashboard``, ``dsmon demo``, ``dsmon watch`` and ``dsmon run`` supervise their
children (Streamlit, the training job) and threads the same way, some with no dashboard at
all.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable

from cli.errors import CommandError

#: How long Streamlit gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0
#: How often a supervisor checks on what it waits for besides signals.
POLL_S = 0.5


def end_child(child: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop a child politely (SIGTERM), then for good (SIGKILL) if it does not go in time."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


class StopEvent(threading.Event):
    """The event :func:`stop_on_signals` sets, with the first signal that set it."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None

    def on_signal(self, signum: int, _frame: object) -> None:
        """The handler: remember which signal came first, and stop."""
        if self.signum is None:
            self.signum = signum
        self.set()


def stop_on_signals() -> StopEvent:
    """An event that SIGINT and SIGTERM set from now on, instead of ending the process.

    A supervisor installs it once and waits on it as often as it likes, so a signal that
    arrives between two waits is not lost; it tells which signal came (Ctrl-C reaches the
    whole process group, a SIGTERM most often this process alone).
    """
    stop = StopEvent()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop.on_signal)
    return stop


def wait_for_signal(
    finished: Callable[[], bool], stop: threading.Event | None = None, poll_s: float = POLL_S
) -> bool:
    """Block until SIGINT/SIGTERM (True), or until ``finished()`` says there is nothing to wait for.

    Args:
        finished: checked every ``poll_s`` seconds (a child that died, a thread that ended).
        stop: the event of :func:`stop_on_signals`; installed here when not given.
        poll_s: how often ``finished`` is checked.
    """
    stop = stop_on_signals() if stop is None else stop
    while not stop.wait(poll_s):
        if finished():
            return stop.is_set()
    return True


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def child_failed(child: subprocess.Popen[bytes], command: str) -> None:
    """Raise when the UI ended by itself with a failure status; a clean exit is fine.

    Raises:
        CommandError: with the child's status as the exit code.
    """
    status = exit_status(child.returncode if child.returncode is not None else 0)
    if status:
        raise CommandError(f"{command}: the dashboard exited with status {status}", code=status)
