"""One rank's measurements and its JSON-lines file, written off the training loop's thread.

The wrapped engine methods only note times and the current phase (a few attribute stores and
list appends per call); turning them into JSON and writing the file happens in a daemon thread
(``dsmon-probe``) that wakes every :data:`INTERVAL_S`. That thread also writes the heartbeat:
the phase the rank is in now and since when, whenever it changed and at least every
:data:`KEEPALIVE_S`, so a rank whose heartbeat stops has stopped (SIGSTOP, a hung process),
while one stuck in a collective keeps saying so. The recorder is opened as the engine is built
(phase ``init``, inside ``deepspeed.initialize``), then says ``idle`` until the engine's first
call: a job that loads data or compiles for minutes before its first step is seen alive.

Line formats (one JSON object per line, documented in dsmon's docs/records.md)::

    {"kind": "rank_step", "ts": "...", "rank": 1, "step": 12, "fwd_ms": 3.1, "bwd_ms": 9.4,
     "step_ms": 2.0, "comm_ms": 6.2, "total_ms": 15.0, "input_ms": 0.4, "micro_steps": 2,
     "clock": "cpu", "skipped_steps": 0, "loss_scale": 65536.0, "loss": 2.31,
     "grad_norm": 0.87, "collectives": [{"op": "all_reduce", "bucket_bytes": 131072,
     "group_size": 8, "calls": 1, "msg_bytes": 132352, "time_ms": 1.9}]}
    {"kind": "heartbeat", "ts": "...", "rank": 1, "step": 13, "phase": "backward",
     "collective": "all_reduce", "phase_since": "...", "pid": 4242}
    {"kind": "heartbeat", ..., "phase": "failed", ..., "error": "RuntimeError: ..."}
    {"kind": "engine", "ts": "...", "rank": 0, "deepspeed": {"version": "0.19.8", ...},
     "backend": "nccl", "world_size": 8, "device": "cuda:0", "effective": {...}, "config": {...}}

The ``engine`` line is written once, by rank 0, from the training thread (:meth:`Recorder.note`,
see ``engine_info``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from datetime import datetime
from typing import Any

from . import values
from .clocks import PhaseClock
from .collectives import CollectiveTally, Key
from .collectives import lines as collective_lines

#: Seconds between wake-ups of the writer thread.
INTERVAL_S = 1.0
#: A heartbeat is written at least this often even when nothing changed.
KEEPALIVE_S = 5.0
#: Timed phases of the engine, in the field names of a ``rank_step`` line.
TIMED = {"forward": "fwd_ms", "backward": "bwd_ms", "step": "step_ms"}
#: Phases before the first step: the engine being built (``init``), then built and not yet
#: called (``idle``), or opened at its first call by a probe installed late (``start``).
BEFORE_TRAINING = ("init", "idle", "start")


def stamp(t: float) -> str:
    """Local time without zone, as DeepSpeed's logger prints it (ms precision)."""
    return datetime.fromtimestamp(t).isoformat(timespec="milliseconds")


#: Characters of an uncaught exception's text kept in the last heartbeat.
MAX_ERROR_CHARS = 300


def uncaught_error() -> str | None:
    """``Type: message`` of the exception that is ending the process, if one is (at exit)."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if exc is None or isinstance(exc, SystemExit):
        return None
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:MAX_ERROR_CHARS]


class Recorder:
    """The measurements of one rank and the thread that writes them to ``path``.

    ``state`` is the heartbeat's content, replaced as a whole tuple (one store is atomic, so
    the writer thread never sees half an update): ``(step, phase, collective, since)``.
    ``phase`` is the first one (``init`` when opened as the engine is built).
    """

    def __init__(
        self,
        path: str,
        rank: int,
        clock: PhaseClock,
        *,
        phase: str = "start",
        interval_s: float = INTERVAL_S,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.path = path
        self.rank = rank
        self.clock = clock
        self.state: tuple[int, str, str | None, float] = (1, phase, None, time.time())
        self._interval_s = interval_s
        self._keepalive_s = keepalive_s
        self._window: dict[str, list[Any]] = {p: [] for p in TIMED}
        self._comm_ms: float | None = None
        self._last_end = time.perf_counter_ns()
        self._input_ms: float | None = None
        self._losses: list[Any] = []
        self._tally = CollectiveTally()
        #: When the rank last left an engine call (``perf_counter_ns``); None before the first.
        self.left_engine_ns: int | None = None
        self._queue: deque[dict[str, Any]] = deque()
        self._written: tuple[Any, ...] | None = None
        self._written_at = 0.0
        self._error: str | None = None
        self._stop = threading.Event()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._thread = threading.Thread(target=self._loop, name="dsmon-probe", daemon=True)

    def start(self) -> None:
        """Write the first heartbeat and start the writer thread."""
        self._flush(force_beat=True)
        self._thread.start()

    # --- called from the training loop (keep cheap) ---------------------------------------

    def enter(self, phase: str, collective: str | None = None) -> None:
        """The rank enters a phase (or a collective inside the current one)."""
        self.state = (self.state[0], phase, collective, time.time())

    def begin(self, clock: PhaseClock) -> None:
        """The engine's first call after it was built: step 1 starts now, timed by ``clock``.

        What happened before (building the engine, its collectives, the script's loading)
        is no part of step 1's ``total_ms`` or ``comm_ms``; the engine's device, known only
        once it is built, picks the clock.
        """
        self.clock = clock
        self._comm_ms = None
        self._tally = CollectiveTally()  # the engine's broadcasts while it was built
        self._last_end = time.perf_counter_ns()

    def timed(self, phase: str, pending: Any) -> None:
        """A finished phase's measurement (pending on CUDA until the device passes it)."""
        self._window[phase].append(pending)

    def comm(self, ms: float) -> None:
        """Host time spent blocked in a collective during this step."""
        self._comm_ms = (self._comm_ms or 0.0) + ms

    def collective(self, key: Key, nbytes: int | None, pendings: list[Any]) -> None:
        """One collective call of this step and its times (see :mod:`.collectives`)."""
        self._tally.add(key, nbytes, pendings)

    def input_wait(self, ms: float) -> None:
        """Host time outside the engine before a forward (data loading, the script's work)."""
        self._input_ms = (self._input_ms or 0.0) + ms

    def loss(self, pending: Any) -> None:
        """The loss one micro-batch passed to ``backward`` (a :func:`.values.take` reading)."""
        self._losses.append(pending)

    def boundary(
        self,
        step: int,
        skipped_steps: int | None = None,
        loss_scale: float | None = None,
        grad_norm: Any = None,
    ) -> None:
        """Optimizer step ``step`` (1-based) just ended: queue its line, start the next.

        ``skipped_steps`` is the engine's count of steps skipped on overflow so far and
        ``loss_scale`` the optimizer's scale after this step, when the engine has them;
        ``grad_norm`` a :func:`.values.take` reading of its global gradient norm.
        """
        now_ns = time.perf_counter_ns()
        self._queue.append(
            {
                "t": time.time(),
                "step": step,
                "window": self._window,
                "comm_ms": self._comm_ms,
                "total_ms": (now_ns - self._last_end) / 1e6,
                "skipped_steps": skipped_steps,
                "loss_scale": loss_scale,
                "input_ms": self._input_ms,
                "losses": self._losses,
                "grad_norm": grad_norm,
                "collectives": self._tally.entries,
            }
        )
        self._window = {p: [] for p in TIMED}
        self._comm_ms = None
        self._input_ms = None
        self._losses = []
        self._tally = CollectiveTally()
        self._last_end = now_ns
        self.state = (step + 1, "outside", None, time.time())

    def note(self, kind: str, fields: dict[str, Any]) -> None:
        """Write one line of ``kind`` now (rare facts such as the engine's config, not steps).

        ``O_APPEND`` makes each ``os.write`` land whole after the writer thread's lines.
        """
        line = {"kind": kind, "ts": stamp(time.time()), "rank": self.rank, **fields}
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())

    # --- the writer thread -----------------------------------------------------------------

    def close(self) -> None:
        """At exit: stop the thread, write what is left and a last ``exited`` heartbeat.

        A process that dies on an uncaught exception still runs its ``atexit`` handlers, after
        Python has kept the exception in ``sys.last_value``: its last heartbeat is ``failed``
        and names it, so the rank is not reported as having ended normally.
        """
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self._interval_s)
        self._error = uncaught_error()
        phase = "failed" if self._error else "exited"
        self.state = (self.state[0], phase, None, time.time())
        self._flush(final=True, force_beat=True)
        os.close(self._fd)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._flush()
            except Exception:  # noqa: BLE001 - a full disk must not stop training
                continue

    def _flush(self, *, final: bool = False, force_beat: bool = False) -> None:
        """Write the step lines whose times are known, then a heartbeat if one is due."""
        lines: list[dict[str, Any]] = []
        while self._queue:
            try:
                line = self._step_line(self._queue[0], final)
            except Exception:  # noqa: BLE001 - an event that cannot be read: drop that step
                self._queue.popleft()
                continue
            if line is None:
                break  # the device has not reached it yet; later lines wait behind it
            self._queue.popleft()
            lines.append(line)
        beat = self._beat(force_beat)
        if beat is not None:
            lines.append(beat)
        if lines:
            data = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines)
            os.write(self._fd, data.encode())

    def _step_line(self, item: dict[str, Any], final: bool) -> dict[str, Any] | None:
        times: dict[str, float | None] = {}
        for phase, field in TIMED.items():
            parts = [self.clock.elapsed_ms(p) for p in item["window"][phase]]
            if any(p is None for p in parts) and not final:
                return None
            known = [p for p in parts if p is not None]
            times[field] = round(sum(known), 3) if known else None
        read = self._values(item, final)
        if read is None:
            return None
        loss, grad_norm, collectives = read
        return {
            "kind": "rank_step",
            "ts": stamp(item["t"]),
            "rank": self.rank,
            "step": item["step"],
            **times,
            "comm_ms": None if item["comm_ms"] is None else round(item["comm_ms"], 3),
            "total_ms": round(item["total_ms"], 3),
            "micro_steps": len(item["window"]["forward"]),
            "clock": self.clock.name,
            "skipped_steps": item["skipped_steps"],
            "loss_scale": item["loss_scale"],
            "input_ms": None if item["input_ms"] is None else round(item["input_ms"], 3),
            "loss": loss,
            "grad_norm": grad_norm,
            "collectives": collectives,
        }

    def _values(
        self, item: dict[str, Any], final: bool
    ) -> tuple[float | None, float | None, list[dict[str, Any]]] | None:
        """The step's loss (the mean of its micro-batches'), gradient norm and collectives.

        None while the device has not passed one of them (on CUDA), unless ``final``: then
        what is still unknown is left out.
        """
        losses = [values.read(p) for p in item["losses"]]
        grad_norm = values.read(item["grad_norm"])
        pending = grad_norm is values.NOT_YET or any(x is values.NOT_YET for x in losses)
        if pending and not final:
            return None
        collectives = collective_lines(item["collectives"], self.clock.elapsed_ms, final)
        if collectives is None:
            return None
        known = [x for x in losses if isinstance(x, float)]
        loss = sum(known) / len(known) if known else None
        return loss, grad_norm if isinstance(grad_norm, float) else None, collectives

    def _beat(self, force: bool) -> dict[str, Any] | None:
        step, phase, collective, since = self.state
        now = time.time()
        key = (step, phase, collective, since)
        if not force and key == self._written and now - self._written_at < self._keepalive_s:
            return None
        self._written, self._written_at = key, now
        return {
            "kind": "heartbeat",
            "ts": stamp(now),
            "rank": self.rank,
            "step": step,
            "phase": phase,
            "collective": collective,
            "phase_since": stamp(since),
            "pid": os.getpid(),
            **({"error": self._error} if self._error else {}),
        }
