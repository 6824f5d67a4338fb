"""The sender: delivers records to the dashboard's ingest endpoint, at least once.

Records are encoded as JSON lines (``dsmon.model.wire``), gzipped and POSTed to ``/v1/records`` with
a bearer token, in batches. The server answers 200 only after its store committed, and the
store keeps one record per key, so sending a batch twice is harmless: delivery is at-least-once
and the store holds each record exactly once.

While the server cannot be reached every batch goes to the on-disk
:class:`~collectors.send.spool.Spool` instead, and the spool drains in order once the server answers again; retries back off
exponentially with jitter, so many collectors do not hammer a dashboard that is coming back.
Each submitted batch carries a callback that runs once its records are durable (acknowledged
or spooled, or refused by the server as invalid); the tailer saves its file positions there,
so a killed collector re-reads exactly what was not yet safe.

**Back-pressure.** A batch of log records that does not fit in the spool (it is full, or the
disk is) is not dropped: it waits in memory, every later batch waits behind it, and
:attr:`Sender.blocked` tells the tail loop to stop reading the logs until the spool drains or
the server answers again. The log itself is the buffer, so memory stays bounded and no line
is lost. GPU samples cannot be read again; those that find the spool full are dropped,
counted in :attr:`SenderStats.dropped`. Batches still waiting at the end of a stop run no
callback: the positions stay before them, and a collector started again on the same state
folder reads them again.

At a stop the sender gets a deadline (:meth:`Sender.stop_within`): its last attempt ignores
the back-off, each request is cut to the time left, the spool is drained while time remains,
and what cannot go in time is spooled.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collectors.send.spool import Spool
from collectors.send.transport import HttpResponse, Transport
from dsmon.model.records import Record
from dsmon.model.wire import encode

logger = logging.getLogger(__name__)

Callback = Callable[[], None]

#: Seconds one round spends draining the spool, so a large backlog does not stall the rest.
DRAIN_BUDGET_S = 2.0
#: Of a stop's grace period, the part kept for spooling what could not be sent.
SPOOL_RESERVE_S = 1.0


class ServerUnavailableError(Exception):
    """The server is unreachable or asked us to come back; the batch must wait."""


@dataclass(slots=True)
class SenderStats:
    """Counters for the collector's status line and tests."""

    sent: int = 0
    inserted: int = 0
    spooled: int = 0
    rejected: int = 0
    dropped: int = 0
    failures: int = 0
    last_error: str | None = None


@dataclass(slots=True)
class _Item:
    """One submitted batch, encoded, with the callback to run once it is durable."""

    lines: list[str]
    done: Callback | None


class Sender:
    """Batches records to the ingest endpoint, spooling while it is away.

    ``submit`` may be called from any thread; everything else runs in the one sender thread
    (:meth:`run`), which also owns the spool. Callbacks run in submission order.

    Args:
        transport: how a body reaches the server (:class:`~collectors.send.transport.UrlTransport`).
        spool: where batches wait while the server is away.
        batch_records: the most records one POST carries.
        max_delay_s: how long a record may wait for its batch to fill.
        backoff_s: first and largest wait between attempts after a failure.
        rng: jitter source (seeded in tests).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        transport: Transport,
        spool: Spool,
        *,
        batch_records: int = 2000,
        max_delay_s: float = 0.2,
        backoff_s: tuple[float, float] = (0.5, 30.0),
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.spool = spool
        self.batch_records = batch_records
        self.max_delay_s = max_delay_s
        self.backoff_s = backoff_s
        self.stats = SenderStats()
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: deque[tuple[list[Record], Callback | None]] = deque()
        self._held: list[_Item] = []  # batches the spool could not take, in order
        self._paused = False  # whether the tail loop was told to wait (for the log lines)
        self._wake = threading.Event()
        self._failures = 0
        self._retry_at = 0.0
        self._deadline: float | None = None

    def submit(self, records: Sequence[Record], on_durable: Callback | None = None) -> None:
        """Queue records; ``on_durable`` runs once they are acknowledged or spooled."""
        with self._lock:
            first = not self._queue
            self._queue.append((list(records), on_durable))
        if first or len(records) >= self.batch_records:
            self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """The sender thread: pump until ``stop``, then deliver or spool what is left."""
        while not stop.is_set():
            # Idle (nothing queued or spooled): sleep until a submit or a stop wakes us, rather
            # than every max_delay_s: most of a quiet collector's CPU went to these wake-ups.
            idle = self.spool.empty and not self.backlog and not self._held
            self._wake.wait(None if idle else self.max_delay_s)
            self._wake.clear()
            if idle and not stop.is_set() and self.backlog < self.batch_records:
                self._wake.wait(self.max_delay_s)  # let the batch fill, as before
                self._wake.clear()
            try:
                self.pump()
            except Exception:  # noqa: BLE001 - the sender thread's outermost loop goes on
                logger.exception("dsmon: sender round failed; continuing")
        self.flush()

    def wake(self) -> None:
        """Make :meth:`run` pump now (used when stopping)."""
        self._wake.set()

    def stop_within(self, seconds: float) -> None:
        """Bound the rest of the work, the final :meth:`flush` included, to ``seconds``."""
        self._deadline = self._clock() + max(0.0, seconds)

    def abort(self) -> None:
        """From another thread: fail the request in flight, so its batch is spooled now.

        For a request sent before the deadline was set, which waits on a silent server with
        the transport's whole timeout.
        """
        self.transport.abort()

    def pump(self) -> None:
        """One round: send (or spool) what was submitted, then drain the spool if possible."""
        items = self._take()
        if items or self._held:
            self._deliver(items)
        if not self.spool.empty and self._may_try():
            self._drain()

    def flush(self) -> None:
        """At shutdown: one last try to send and drain, within the deadline; the rest is spooled.

        The try ignores the back-off: a server that came back during the last long wait
        should still get the run's last records, since a stopped sidecar's spool goes with
        its pod.
        """
        self._retry_at = 0.0
        items = self._take()
        if items or self._held:
            self._deliver(items)
        if not self.spool.empty and self._may_try():
            self._drain(final=True)
        self._to_spool([*self._held, *self._take()])
        self.spool.close()
        if left := sum(len(item.lines) for item in self._held):
            logger.error(
                "dsmon: %d records neither sent nor spooled at the stop (no room in the spool); their "
                "lines are read again when a collector starts on this state folder",
                left,
            )

    @property
    def blocked(self) -> bool:
        """Batches wait for room in the spool: the logs must not be read further for now."""
        return bool(self._held)

    @property
    def backlog(self) -> int:
        """Records submitted but not yet handled by the sender thread."""
        with self._lock:
            return sum(len(recs) for recs, _ in self._queue)

    def _take(self) -> list[_Item]:
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
        return [_Item([encode(r) for r in recs], done) for recs, done in items]

    def _deliver(self, items: list[_Item]) -> None:
        """Straight to the server when nothing waits before it, else behind the spool.

        Submitted batches are joined into POSTs of up to ``batch_records``; after a failure
        every batch of the round is spooled, including any already stored (resending those
        adds nothing, while spooling fewer would need to know which POST held which).
        Batches held back by a full spool go first.
        """
        items = [*self._held, *items]  # still held (the logs still wait) until taken
        if self.spool.empty and self._may_try():
            lines = [line for item in items for line in item.lines]
            try:
                for start in range(0, len(lines), self.batch_records):
                    self._post(lines[start : start + self.batch_records])
            except ServerUnavailableError as exc:
                self._failed(str(exc))
            else:
                self._succeeded()
                self._set_held([])
                _run_all(items)
                return
        self._to_spool(items)

    def _to_spool(self, items: list[_Item]) -> None:
        """Spool each batch whole, in order; what the spool cannot take is held back.

        Only a spooled batch runs its callback, and callbacks run in order, so once a log
        batch is held every later one is held too (see the module docstring).
        """
        held: list[_Item] = []
        for item in items:
            if held and item.done is not None:
                held.append(item)
            elif self._spool_one(item):
                self.stats.spooled += len(item.lines)
                if item.done is not None:
                    item.done()
            elif item.done is not None:
                held.append(item)
            else:
                self.stats.dropped += len(item.lines)
        self._set_held(held)

    def _set_held(self, held: list[_Item]) -> None:
        """Keep the batches the spool could not take; say when reading pauses and resumes."""
        if held and not self._paused:
            logger.warning(
                "dsmon: spool %s cannot take more (%d of %d bytes): log reading paused until "
                "%s takes records again",
                self.spool.directory, self.spool.size_bytes, self.spool.max_bytes,
                self.transport.url,
            )  # fmt: skip
        elif self._paused and not held:
            logger.warning("dsmon: the spool has room again: log reading resumed")
        self._held, self._paused = held, bool(held)

    def _spool_one(self, item: _Item) -> bool:
        """Append one batch to the spool; False when it does not fit or the disk is full."""
        try:
            return self.spool.append(item.lines)
        except OSError as exc:
            if not self._paused:
                logger.error("dsmon: cannot spool %d records: %s", len(item.lines), exc)
            return False

    def _drain(self, final: bool = False) -> None:
        """Send spooled chunks oldest first until empty, failing, or out of this round's time.

        Args:
            final: at a stop, go on until the deadline rather than for one round's budget.
        """
        until = self._clock() + DRAIN_BUDGET_S
        if self._deadline is not None:
            end = self._deadline - SPOOL_RESERVE_S
            until = end if final else min(until, end)
        while self._clock() < until:
            chunk = self.spool.peek(self.batch_records)
            if chunk is None:
                self._succeeded()
                return
            try:
                if chunk.lines:
                    self._post(list(chunk.lines))
            except ServerUnavailableError as exc:
                self._failed(str(exc))
                return
            self.spool.ack(chunk)

    def _post(self, lines: list[str]) -> None:
        """POST one batch; on 400/413 split it to isolate and drop the records at fault."""
        if not lines:
            return
        body = gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), compresslevel=3)
        try:
            resp = self._send(body)
        except OSError as exc:
            raise ServerUnavailableError(f"cannot reach {self.transport.url}: {exc}") from None
        if resp.status == 200:
            self._count_ok(len(lines), resp)
        elif resp.status in (400, 413) and len(lines) > 1:
            half = len(lines) // 2
            self._post(lines[:half])
            self._post(lines[half:])
        elif resp.status in (400, 413):
            self.stats.rejected += 1
            reason = resp.body.decode("utf-8", "replace")[:300]
            logger.warning("dsmon: server refused a record (%d): %s; dropped", resp.status, reason)
        elif resp.status in (401, 403):
            raise ServerUnavailableError(
                f"{self.transport.url} refused the token ({resp.status}): check --token-file"
            )
        else:
            # 5xx, or a 404/405 from something that is not the ingest server (the dashboard's
            # own port, a proxy): configuration an operator fixes, so keep the records.
            raise ServerUnavailableError(
                f"{self.transport.url} answered {resp.status} {resp.reason}"
            )

    def _send(self, body: bytes) -> HttpResponse:
        """One POST, cut to the time left before the stop deadline when there is one."""
        if self._deadline is None:
            return self.transport.post(body)
        left = self._deadline - SPOOL_RESERVE_S - self._clock()
        if left <= 0:
            raise OSError("the stop deadline has passed")
        return self.transport.post(body, timeout_s=left)

    def _count_ok(self, n: int, resp: HttpResponse) -> None:
        self.stats.sent += n
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            self.stats.inserted += int(json.loads(resp.body).get("inserted", 0))

    def _may_try(self) -> bool:
        now = self._clock()
        in_time = self._deadline is None or now < self._deadline - SPOOL_RESERVE_S
        return now >= self._retry_at and in_time

    def _succeeded(self) -> None:
        if self._failures:
            logger.warning("dsmon: %s reachable again; spool drained", self.transport.url)
        self._failures = 0

    def _failed(self, reason: str) -> None:
        """Back off exponentially with jitter (0.5x to 1.5x) up to the largest wait."""
        self._failures += 1
        self.stats.failures += 1
        self.stats.last_error = reason
        first, cap = self.backoff_s
        wait = min(cap, first * 2 ** (self._failures - 1)) * self._rng.uniform(0.5, 1.5)
        self._retry_at = self._clock() + wait
        if self._failures == 1 or self._failures % 20 == 0:
            logger.warning("dsmon: %s; spooling, retry in %.1f s", reason, wait)


def _run_all(items: list[_Item]) -> None:
    for item in items:
        if item.done is not None:
            item.done()
