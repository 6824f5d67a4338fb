"""The collector agent: tailer, NVML poller and sender, each in its own named thread.

Three daemon threads, named so ``py-spy dump`` and thread listings read plainly:
``dsmon-tail`` polls the log files (woken early by watchdog, see :class:`collectors.tailer.Waker`),
``dsmon-nvml`` samples the GPUs every interval, and ``dsmon-send`` delivers both. The tail
thread hands each batch to the sender with a callback that saves the tailer's checkpoint once
the batch is durable, so the state file never runs ahead of delivery.

Stopping is ordered: the producers stop first, then the sender flushes what they submitted
(sending it, or spooling it when the server is away), and only then are the last positions
saved. A SIGKILL skips all that and loses nothing either: what was not yet durable is read
again from the logs on restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from collectors.nvml import NvmlPoller
from collectors.sender import Sender
from collectors.state import Checkpoint
from collectors.tailer import Tailer, Waker

logger = logging.getLogger(__name__)

#: The tail thread waits while this many records are queued for the sender (back-pressure:
#: the log itself is the buffer, so reading a large log at start-up cannot exhaust memory).
MAX_BACKLOG = 50_000
#: watchdog reports every write; polls closer than this are merged into one.
MIN_POLL_GAP_S = 0.2
#: The state file is rewritten (with two fsyncs) at most this often. A position saved late
#: only means a few more lines are read again after a crash, and stored once all the same.
COMMIT_EVERY_S = 1.0


class Agent:
    """Runs one node's collection until :meth:`stop`.

    Args:
        tailer: the log tailer.
        sender: delivers records; its thread is started here.
        poller: the NVML poller, already started, or None when NVML is unavailable.
        tail_interval_s: the tail loop's poll period (watchdog may wake it sooner).
        nvml_interval_s: seconds between GPU samples.
        watch: wake the tail loop on file-system events (it polls in any case).
    """

    def __init__(
        self,
        tailer: Tailer,
        sender: Sender,
        poller: NvmlPoller | None = None,
        *,
        tail_interval_s: float = 0.5,
        nvml_interval_s: float = 1.0,
        watch: bool = True,
    ) -> None:
        assert tail_interval_s > 0 and nvml_interval_s > 0
        self.tailer = tailer
        self.sender = sender
        self.poller = poller
        self.tail_interval_s = tail_interval_s
        self.nvml_interval_s = nvml_interval_s
        self._stop_producers = threading.Event()
        self._stop_sender = threading.Event()
        self._wake = threading.Event()
        self._waker = Waker(self._wake) if watch else None
        self._last_ckpt: Checkpoint | None = None
        self._threads: list[threading.Thread] = []
        self._commit_lock = threading.Lock()
        self._committed_at = -COMMIT_EVERY_S
        self._unsaved: Checkpoint | None = None

    def start(self) -> None:
        """Start the three threads."""
        if self._waker is not None:
            self._waker.start(self.tailer.watch_dirs())
        self._spawn("dsmon-send", lambda: self.sender.run(self._stop_sender))
        self._spawn("dsmon-tail", self._tail_loop)
        if self.poller is not None and self.poller.available:
            self._spawn("dsmon-nvml", self._nvml_loop)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop reading, deliver or spool what was read, save positions, release NVML."""
        self._stop_producers.set()
        self._wake.set()
        if self._waker is not None:
            self._waker.stop()
        for t in self._threads:
            if t.name != "dsmon-send":
                t.join(timeout_s)
        self._stop_sender.set()
        self.sender.wake()
        for t in self._threads:
            if t.name == "dsmon-send":
                t.join(timeout_s)
        with self._commit_lock:
            if self._unsaved is not None:
                self.tailer.commit(self._unsaved)
        self.tailer.close()
        if self.poller is not None:
            self.poller.close()

    @property
    def alive(self) -> bool:
        """Every thread is still running."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def tail_once(self) -> None:
        """One poll of the logs, handed to the sender with its checkpoint."""
        batch = self.tailer.poll()
        if batch.records or batch.checkpoint != self._last_ckpt:
            self._last_ckpt = batch.checkpoint
            ckpt = batch.checkpoint
            self.sender.submit(batch.records, lambda: self._delivered(ckpt))

    def _delivered(self, ckpt: Checkpoint) -> None:
        """A batch is durable: save its checkpoint, at most every :data:`COMMIT_EVERY_S`."""
        with self._commit_lock:
            now = time.monotonic()
            if now - self._committed_at < COMMIT_EVERY_S:
                self._unsaved = ckpt
                return
            self.tailer.commit(ckpt)
            self._committed_at, self._unsaved = now, None

    def _tail_loop(self) -> None:
        stop = self._stop_producers
        while not stop.is_set():
            started = time.monotonic()
            _guarded("tail", self.tail_once)
            while self.sender.backlog > MAX_BACKLOG and not stop.wait(0.05):
                pass
            self._wake.wait(self.tail_interval_s)
            self._wake.clear()
            stop.wait(MIN_POLL_GAP_S - (time.monotonic() - started))

    def _nvml_loop(self) -> None:
        assert self.poller is not None
        poller = self.poller
        _guarded("nvml", lambda: self.sender.submit(poller.poll()))
        while not self._stop_producers.wait(self.nvml_interval_s):
            _guarded("nvml", lambda: self.sender.submit(poller.poll()))

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)


def _guarded(what: str, step: Callable[[], None]) -> None:
    """Run one step of a thread's loop; an unexpected error is logged, the loop goes on."""
    try:
        step()
    except Exception:  # noqa: BLE001 - the outermost loop of a thread must survive anything
        logger.exception("dsmon: %s step failed; continuing", what)
