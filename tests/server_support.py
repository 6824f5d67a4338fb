"""Stopping a test's ingest server off the test's clock.

uvicorn notices ``should_exit`` at its next 0.1 s tick and then waits another 0.1 s for the
connections it asked to close, so every ``IngestServer.stop`` costs about 0.2 s of sleep.
A fixture, or a test at its end, that only needs its server gone stops it in a thread of its own,
and the next test runs meanwhile; at the end of the session :func:`finish_stops` waits for each
and returns what any raised, so a stop that fails still fails the run (tests/conftest.py).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # conftest imports this module: it must not load the server stack
    from dsmon.serve.run import IngestServer

_STOPPING: list[threading.Thread] = []
_ERRORS: list[BaseException] = []


def stop_later(handle: IngestServer) -> None:
    """Stop ``handle`` (and close its store) in a background thread."""

    def stop() -> None:
        try:
            handle.stop()
        except BaseException as exc:  # noqa: BLE001 - reported by finish_stops
            _ERRORS.append(exc)

    thread = threading.Thread(target=stop, name=f"stop-{handle.port}", daemon=True)
    thread.start()
    _STOPPING.append(thread)


def finish_stops(timeout_s: float = 30.0) -> list[str]:
    """Wait for every :func:`stop_later`; what went wrong, one line each (empty: all stopped)."""
    for thread in _STOPPING:
        thread.join(timeout_s)
    late = [f"{t.name}: not stopped within {timeout_s} s" for t in _STOPPING if t.is_alive()]
    return late + [repr(exc) for exc in _ERRORS]
