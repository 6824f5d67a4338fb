"""The collector agent: tailer, NVML poller and sender, each in its own named thread.

:func:`build_agent` assembles one from a node's :class:`Settings` (what ``dsmon collect``,
``dsmon watch`` and ``dsmon run`` are told), holding the state folder's lock
(:func:`lock_state_dir`) so that no second collector shares its positions and spool.

Three daemon threads, named so ``py-spy dump`` and thread listings read plainly:
``dsmon-tail`` polls the log files (woken early by watchdog, see
:class:`collectors.tail.tailer.Waker`), ``dsmon-nvml`` samples the GPUs every interval, and
``dsmon-send`` delivers both. The tail thread hands each batch to the sender with a callback
that saves the tailer's checkpoint once the batch is durable, so the state file never runs
ahead of delivery.

**Stopping never leaves a line behind** (a sidecar is stopped right after the trainer ends, so
the lines of its last half second must still go). Within one grace period (``--stop-timeout``)
the producers stop, then one final read takes every followed file to its end (globs matched
again, the profile file read even if it has not settled), then the sender makes one last
attempt to deliver everything, draining its spool too, and spools what cannot go in time.
Only then are the last positions saved, and they cover only what was sent or spooled. A
SIGKILL skips all that and loses nothing either: what was not yet durable is read again from
the logs on restart.

**What the parsers still hold at a stop is kept back by default**: an unterminated last line
(a writer mid-line: ``tee`` of a block-buffered stdout cuts lines anywhere), a block still open
(a config dump, a table), a profile file caught mid-write. Sent now, they would be stored cut
where the stop found them, and the store keeps the first copy of a record, so a collector
started again on the same state folder could not replace them: a stop and restart would not
give what ``dsmon import`` of the whole log gives. Kept back, the restarted collector reads
them whole. A DeepSpeed run that has ended leaves nothing open (its last lines are complete
and the launcher's ``exits successfully`` lines close any table), so nothing is lost then.
(Records waiting for a step number are never held live: they are sent at once and again with
their step, see ``LogParser(live=True)``.) ``release_at_stop`` (``--release-at-stop``) sends
them at the stop instead, for a log cut off for good (the writer was killed mid-line) whose
collector will not be started again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from collectors.gpu.nvml import NvmlPoller, open_poller
from collectors.gpu.selection import choose_selection
from collectors.send.sender import SPOOL_RESERVE_S, Sender
from collectors.send.spool import Spool
from collectors.send.transport import UrlTransport
from collectors.tail.state import Checkpoint, StateFile
from collectors.tail.tailer import Tailer, Waker

logger = logging.getLogger(__name__)

#: The tail thread waits while this many records are queued for the sender, and while the
#: sender holds batches its full spool cannot take (back-pressure: the log itself is the
#: buffer, so neither a large log at start-up nor a long outage can exhaust memory or lose
#: a line).
MAX_BACKLOG = 50_000
#: How often a waiting tail thread looks again whether the sender can take more.
BACKPRESSURE_POLL_S = 0.1
#: watchdog reports every write; polls closer than this are merged into one.
MIN_POLL_GAP_S = 0.2
#: The state file is rewritten (with two fsyncs) at most this often. A position saved late
#: only means a few more lines are read again after a crash, and stored once all the same.
COMMIT_EVERY_S = 1.0
#: Default grace period of a stop: within Kubernetes' default 30 s termination grace.
STOP_TIMEOUT_S = 20.0
#: Beyond the grace period, how long the sender thread may take to return from its last
#: request (its time limit is the grace period, so this is only scheduling slack).
JOIN_SLACK_S = 2.0
#: Where collectors keep their state and spool unless a state folder is given.
STATE_HOME_ENV = "XDG_STATE_HOME"


class Agent:
    """Runs one node's collection until :meth:`stop`.

    Args:
        tailer: the log tailer.
        sender: delivers records; its thread is started here.
        poller: the NVML poller, already started, or None when NVML is unavailable.
        tail_interval_s: the tail loop's poll period (watchdog may wake it sooner).
        nvml_interval_s: seconds between GPU samples.
        watch: wake the tail loop on file-system events (it polls in any case).
        release_at_stop: send what the parsers still hold at a stop instead of keeping it
            back for a restart (see the module docstring).
        state_lock: the lock on the state folder (:func:`lock_state_dir`), held as long as
            the agent lives.
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
        release_at_stop: bool = False,
        state_lock: IO[str] | None = None,
    ) -> None:
        assert tail_interval_s > 0 and nvml_interval_s > 0
        self.state_lock = state_lock
        self.release_at_stop = release_at_stop
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
        self._saved_gens = tailer.checkpoint().generations()

    def start(self) -> None:
        """Start the three threads."""
        if self._waker is not None:
            self._waker.start(self.tailer.watch_dirs())
        self._spawn("dsmon-send", lambda: self.sender.run(self._stop_sender))
        self._spawn("dsmon-tail", self._tail_loop)
        if self.poller is not None and self.poller.available:
            self._spawn("dsmon-nvml", self._nvml_loop)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Read the logs one last time, deliver or spool it all, save positions, release NVML.

        Args:
            timeout_s: the grace period for all of it; what the server has not taken by then
                is spooled (the spool is kept for the next collector on this state folder).
        """
        deadline = time.monotonic() + timeout_s
        self._stop_reading(deadline)
        self._stop_sending(deadline)
        with self._commit_lock:
            if self._unsaved is not None:
                self.tailer.commit(self._unsaved)
                self._unsaved = None
        self.tailer.close()
        if self.poller is not None:
            self.poller.close()

    def _stop_reading(self, deadline: float) -> None:
        """Stop the producers, then read every log to its end one last time."""
        self._stop_producers.set()
        self._wake.set()
        if self._waker is not None:
            self._waker.stop()
        if not self._join(lambda name: not _is_sender(name), deadline):
            # A read stuck on a dead NFS server: the tailer is not free to read again.
            logger.error("dsmon: the log reader did not stop in time: no final read")
        elif self.sender.blocked:
            # Reading is paused on a full spool: what is left could be neither sent nor
            # spooled, and after a long outage it may be far more than memory holds.
            logger.warning(
                "dsmon: the spool is full: no final read; a collector started again on this "
                "state folder reads on from where reading paused"
            )
        else:
            _guarded("final read", self._final_read)

    def _stop_sending(self, deadline: float) -> None:
        """Let the sender deliver or spool everything by the deadline."""
        self.sender.stop_within(deadline - time.monotonic())
        self._stop_sender.set()
        self.sender.wake()
        if not any(_is_sender(t.name) for t in self._threads):
            self.sender.flush()  # never started: flush here
        elif not self._join(_is_sender, deadline - SPOOL_RESERVE_S):
            self.sender.abort()  # a request sent before the stop still waits on the server
            if not self._join(_is_sender, deadline + JOIN_SLACK_S):
                logger.error(
                    "dsmon: records still in flight at the end of --stop-timeout are neither "
                    "sent nor spooled; their lines are read again when a collector starts on "
                    "this state folder"
                )

    def _join(self, which: Callable[[str], bool], deadline: float) -> bool:
        """Wait for the named threads until the deadline; whether they all ended."""
        for t in self._threads:
            if which(t.name):
                t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads if which(t.name))

    def _final_read(self) -> None:
        """The last read of every log (and, if asked, the parsers' held records), one batch."""
        batch = self.tailer.poll(final=True)
        if self.release_at_stop:
            batch.records.extend(self.tailer.release())
        ckpt = batch.checkpoint
        self.sender.submit(batch.records, lambda: self._delivered(ckpt))

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
        """A batch is durable: save its checkpoint, at most every :data:`COMMIT_EVERY_S`.

        A checkpoint that knows a generation the saved one does not (a rotation) is saved at
        once: a generation's records are keyed by its ``path#N`` label, and a collector killed
        after sending some of them must resume that generation under the same label, not
        meet the file anew under its rotated name and send its lines again under that one.
        """
        with self._commit_lock:
            now = time.monotonic()
            rotated = self._saved_gens != ckpt.generations()
            if now - self._committed_at < COMMIT_EVERY_S and not rotated:
                self._unsaved = ckpt
                return
            self.tailer.commit(ckpt)
            self._committed_at, self._unsaved = now, None
            self._saved_gens = ckpt.generations()

    def _tail_loop(self) -> None:
        stop = self._stop_producers
        while not stop.is_set():
            started = time.monotonic()
            _guarded("tail", self.tail_once)
            while self._sender_full() and not stop.wait(BACKPRESSURE_POLL_S):
                pass
            self._wake.wait(self.tail_interval_s)
            self._wake.clear()
            stop.wait(MIN_POLL_GAP_S - (time.monotonic() - started))

    def _sender_full(self) -> bool:
        return self.sender.blocked or self.sender.backlog > MAX_BACKLOG

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


def _is_sender(thread_name: str) -> bool:
    return thread_name == "dsmon-send"


def _guarded(what: str, step: Callable[[], None]) -> None:
    """Run one step of a thread's loop; an unexpected error is logged, the loop goes on."""
    try:
        step()
    except Exception:  # noqa: BLE001 - the outermost loop of a thread must survive anything
        logger.exception("dsmon: %s step failed; continuing", what)


# --- one node's agent from its settings -----------------------------------------------------


class StateDirBusyError(Exception):
    """Another collector holds the state folder: two on one spool would corrupt it."""


@dataclass(frozen=True, slots=True)
class Settings:
    """What one node's collector follows and how, read by :func:`build_agent`.

    The options ``dsmon collect``, ``dsmon watch`` and ``dsmon run`` share.

    Args:
        logs: log files or globs to follow.
        run: the run name of every record.
        node: the node name of every record.
        state_dir: positions and spool (:func:`default_state_dir` when none is given).
        profile_files: the flops profiler's output files, re-read when rewritten.
        config_files: the run's ds_config files, for the health checklist.
        probe_dirs: folders of the per-rank probe's files.
        monitor_files: globs of csv_monitor's series files.
        from_end: skip what the logs hold now.
        gpus: the ``--gpus`` selection text (None: ``$DSMON_GPUS`` or the visible devices).
        nvml_interval_s: seconds between GPU samples; 0 for none.
        tail_interval_s: the log poll period.
        retry_max_s: the longest wait between retries while the server is away.
        release_at_stop: send what the parsers still hold at a stop.
        spool_max_bytes: the bound of the on-disk spool.
    """

    logs: Sequence[str]
    run: str
    node: str
    state_dir: Path
    profile_files: Sequence[str] = ()
    config_files: Sequence[str] = ()
    probe_dirs: Sequence[str] = ()
    monitor_files: Sequence[str] = ()
    from_end: bool = False
    gpus: str | None = None
    nvml_interval_s: float = 1.0
    tail_interval_s: float = 0.5
    retry_max_s: float = 30.0
    release_at_stop: bool = False
    spool_max_bytes: int = 1 << 30


def default_state_dir(run: str, node: str) -> Path:
    """``$XDG_STATE_HOME/dsmon/collect/<run>@<node>`` (``~/.local/state`` by default)."""
    home = os.environ.get(STATE_HOME_ENV) or str(Path.home() / ".local" / "state")
    safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", f"{run}@{node}")
    return Path(home) / "dsmon" / "collect" / safe


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold the state folder for this process: two collectors on one spool would corrupt it.

    Raises:
        StateDirBusyError: another process holds it.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    f = open(state_dir / "lock", "w")  # noqa: SIM115 - held open for the process's lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise StateDirBusyError(f"{state_dir} is in use by another collector") from None
    return f


def build_agent(
    settings: Settings, url: str, token: str, environ: Mapping[str, str] = os.environ
) -> Agent:
    """The agent of ``settings``, sending to the ingest server at ``url``; not started yet.

    Raises:
        ValueError: ``url`` is not an http(s) URL (checked before anything is locked).
        collectors.gpu.selection.SelectionError: the GPU selection is not one.
        StateDirBusyError: another collector holds the state folder.
    """
    transport = UrlTransport(url, token)
    gpus = choose_selection(settings.gpus, environ)
    lock = lock_state_dir(settings.state_dir)
    tailer = Tailer(
        settings.logs,
        run=settings.run,
        node=settings.node,
        state=StateFile(settings.state_dir / "tail.json"),
        profile_files=settings.profile_files,
        config_files=settings.config_files,
        from_end=settings.from_end,
        probe_dirs=settings.probe_dirs,
        monitor_files=settings.monitor_files,
    )
    spool = Spool(settings.state_dir / "spool", max_bytes=settings.spool_max_bytes)
    sender = Sender(transport, spool, backoff_s=(0.5, settings.retry_max_s))
    poller = None
    if settings.nvml_interval_s > 0:
        poller = open_poller(settings.run, settings.node, gpus)
    return Agent(
        tailer,
        sender,
        poller,
        tail_interval_s=settings.tail_interval_s,
        nvml_interval_s=settings.nvml_interval_s or 1.0,
        release_at_stop=settings.release_at_stop,
        state_lock=lock,
    )
