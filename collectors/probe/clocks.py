"""Timing a phase without ever waiting for the device.

On the CPU a phase's time is the monotonic clock's difference. On CUDA the host only queues
work, so host time says little about the device: a phase is bracketed by two CUDA events
recorded on the current stream and read later, once the device has passed the second one
(``Event.query()`` never blocks). No ``synchronize()`` is ever called: it would stall the
training loop the probe is meant to observe.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class PhaseClock(Protocol):
    """Starts and stops the timing of one phase; :meth:`elapsed_ms` reads a stopped one."""

    name: str
    #: ``torch.cuda`` when the phases run on a CUDA device, else None.
    cuda: Any

    def start(self) -> Any:
        """A token for :meth:`stop` (cheap: this is the training loop's hot path)."""

    def stop(self, token: Any) -> Any:
        """A pending measurement for :meth:`elapsed_ms`."""

    def elapsed_ms(self, pending: Any) -> float | None:
        """Milliseconds of a stopped phase, or None while the device has not got there."""


class MonotonicClock:
    """Host time: right on the CPU accelerator, where every phase runs on the host."""

    name = "cpu"
    cuda = None

    def start(self) -> int:
        """Now, in nanoseconds."""
        return time.perf_counter_ns()

    def stop(self, token: int) -> float:
        """The phase's length in ms, known at once."""
        return (time.perf_counter_ns() - token) / 1e6

    def elapsed_ms(self, pending: float) -> float:
        """Already a number."""
        return pending


class CudaEventClock:
    """Device time from CUDA events; ``cuda`` is ``torch.cuda`` (given, so tests can fake it)."""

    name = "cuda"

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        self.cuda = cuda

    def start(self) -> Any:
        """An event recorded on the current stream."""
        ev = self._cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def stop(self, token: Any) -> tuple[Any, Any]:
        """The start event and a new end event, to be read later."""
        end = self._cuda.Event(enable_timing=True)
        end.record()
        return (token, end)

    def elapsed_ms(self, pending: tuple[Any, Any]) -> float | None:
        """The events' distance once the device has reached the end one; None before."""
        start, end = pending
        if not end.query():
            return None
        return float(start.elapsed_time(end))


def clock_for(engine: Any) -> PhaseClock:
    """CUDA events when the engine's device is a CUDA device, else the monotonic clock."""
    device = getattr(engine, "device", None)
    if getattr(device, "type", str(device)) == "cuda" or str(device).startswith("cuda"):
        try:
            import torch

            if torch.cuda.is_available():
                return CudaEventClock(torch.cuda)
        except Exception:  # noqa: BLE001 - the probe must never break the run
            pass
    return MonotonicClock()
