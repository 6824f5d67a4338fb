"""The ingest HTTP server: collectors POST records here, scripts and Prometheus read from here.

It runs on its own port, next to the Streamlit UI rather than inside it (docs/ingest.md says
why): ``dsmon dashboard`` starts it in a thread with :func:`start_ingest_server`, and
``dsmon serve`` runs it alone for deployments whose UI lives elsewhere.

Endpoints (docs/ingest.md has the details):

- ``POST /v1/records``: JSON lines (``dsmon.model.wire``), optionally gzipped. 401 without the
  bearer token (checked before the body is read), 413 over the size limit (declared,
  streamed or inflated), 408 when the body is not in within :attr:`Limits.body_timeout_s`,
  400 naming the first bad line and field (or data the database refuses: a retry cannot
  help), 503 with ``Retry-After`` when the store fails or no body slot frees up in time;
  200 ``{"accepted", "inserted"}`` only after the store committed. A batch is stored whole
  or not at all, and a replayed batch adds nothing, so a sender that retries after a lost
  answer never duplicates a record.
- ``GET /v1/runs``, ``GET /v1/records?run=&kind=&since=&limit=``: JSON for scripts (token
  required: they expose the training data).
- ``GET /healthz``: whether the store answers and takes writes. ``GET /metrics``: Prometheus
  text.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dsmon.model import wire
from dsmon.serve.batch import parse_batch_rows
from dsmon.serve.body import BatchError, check_length, inflate
from dsmon.serve.metrics import StoreCollector
from dsmon.serve.query import QueryError, records_filter
from dsmon.serve.seal import PageSealer
from dsmon.serve.tokens import check_token, token_matches
from dsmon.store.errors import StoreDataError, StoreError
from dsmon.store.store import Store

if TYPE_CHECKING:  # the health watcher loads pandas: only when alerts are asked for
    from dsmon.watch.health import RuleStates

logger = logging.getLogger(__name__)

#: Largest request body accepted, before and after gzip: 16 MiB is ~60,000 records.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: How long a failed write keeps ``/healthz`` at 503 when no write succeeded since. It
#: expires so that a server taken out of rotation for it gets traffic, and a chance, again.
WRITE_FAILURE_HOLD_S = 60.0
#: ``/healthz`` commits a probe write at most this often (it needs no token).
PROBE_EVERY_S = 5.0

# What a store raises when its database is unreachable or busy: the client should retry.
_STORE_ERRORS = (StoreError, sqlite3.Error, OSError)


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """What one client may cost the server (docs/ingest.md, "Limits").

    A POST is read only after its token checked out and once one of ``batches_in_hand``
    slots is free: a decoded 16 MiB batch takes ~10x its size in memory, so that bounds
    memory whatever the number of senders. A body must keep arriving once it has its slot:
    within ``body_grace_s``, plus a second for every ``body_min_rate`` bytes received, and
    within ``body_timeout_s`` in all (408 otherwise). So a client that trickles its body
    holds a slot for seconds, not for a minute: four of them once kept every slot for 60 s,
    and the collectors behind them waited 30 s for a 503. A request waits ``slot_wait_s``
    at most for a slot (503 and ``Retry-After`` after that), and request headers must be
    complete ``headers_timeout_s`` after their first byte (``dsmon.serve.run`` closes the
    connection).
    """

    max_body_bytes: int = MAX_BODY_BYTES
    batches_in_hand: int = 4
    body_timeout_s: float = 60.0
    body_grace_s: float = 5.0
    body_min_rate: int = 64 * 1024
    slot_wait_s: float = 30.0
    headers_timeout_s: float = 10.0

    def body_deadline_s(self, received: int) -> float:
        """Seconds after taking its slot by which a body must be in, ``received`` bytes in."""
        return min(self.body_timeout_s, self.body_grace_s + received / self.body_min_rate)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class IngestApi:
    """The endpoints, bound to one store and token; :func:`create_app` wires them up.

    Store calls run in Starlette's thread pool: the stores are thread-safe and blocking, and
    a 16 MiB batch must not stall the event loop that answers the other collectors.
    """

    def __init__(
        self,
        store: Store,
        token: str,
        limits: Limits,
        metrics_public: bool,
        health: RuleStates | None = None,
        sealer: PageSealer | None = None,
    ) -> None:
        self.store = store
        self.sealer = sealer
        self.token = check_token(token, "ingest token")
        self.limits = limits
        self.max_body_bytes = limits.max_body_bytes
        self.metrics_public = metrics_public
        self._working = asyncio.Semaphore(limits.batches_in_hand)
        self._write_failed: tuple[float, str] | None = None  # (monotonic time, reason)
        self._probed: tuple[float, str | None] = (-PROBE_EVERY_S, None)
        self.registry = CollectorRegistry()
        self.in_hand = Gauge(
            "dsmon_ingest_bodies_in_hand",
            "POST bodies being read, decoded or stored",
            registry=self.registry,
        )
        self.waiting = Gauge(
            "dsmon_ingest_bodies_waiting",
            "POST requests waiting for a slot, their bodies not read yet",
            registry=self.registry,
        )
        self.registry.register(StoreCollector(store))
        if health is not None:
            from dsmon.watch.health import HealthCollector

            self.registry.register(HealthCollector(health))
        self.requests = Counter(
            "dsmon_ingest_requests",
            "POST /v1/records requests by answer",
            ["code"],
            registry=self.registry,
        )
        self.received = Counter(
            "dsmon_ingest_records",
            "Records received (accepted) and newly stored (inserted)",
            ["outcome"],
            registry=self.registry,
        )

    def _authorised(self, request: Request) -> bool:
        return token_matches(request.headers.get("authorization"), self.token)

    def _denied(self) -> JSONResponse:
        return _error(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})

    async def post_records(self, request: Request) -> Response:
        """Store one batch, answering only after the store committed it."""
        response = await self._post(request)
        self.requests.labels(str(response.status_code)).inc()
        return response

    async def _post(self, request: Request) -> Response:
        if not self._authorised(request):
            return self._denied()
        try:
            check_length(request.headers.get("content-length"), self.max_body_bytes)
            async with self._slot():
                body = await self._read_body(request)
                return await self._store(body, request.headers.get("content-encoding"))
        except BatchError as exc:
            return _error(exc.status, exc.message, exc.headers)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of the ``batches_in_hand`` slots, or 503 after waiting ``slot_wait_s``."""
        self.waiting.inc()
        try:
            async with asyncio.timeout(self.limits.slot_wait_s):
                await self._working.acquire()
        except TimeoutError:
            raise BatchError(503, "server busy: try again later", {"Retry-After": "5"}) from None
        finally:
            self.waiting.dec()
        self.in_hand.inc()
        try:
            yield
        finally:
            self.in_hand.dec()
            self._working.release()

    async def _store(self, body: bytes, encoding: str | None) -> Response:
        try:
            accepted, inserted = await run_in_threadpool(self._decode_and_add, body, encoding)
        except StoreDataError as exc:
            logger.warning("dsmon ingest: the store refused the data, batch refused: %s", exc)
            return _error(400, f"store refused the records: {exc}")
        except _STORE_ERRORS as exc:
            self._write_failed = (time.monotonic(), _one_line(exc))
            logger.warning("dsmon ingest: store failed, batch refused with 503: %s", exc)
            return _error(503, f"store: {_one_line(exc)}", {"Retry-After": "5"})
        self._write_failed = None
        self.received.labels("accepted").inc(accepted)
        self.received.labels("inserted").inc(inserted)
        return JSONResponse({"accepted": accepted, "inserted": inserted})

    async def _read_body(self, request: Request) -> bytes:
        """The raw body, refused (413) as soon as it passes the limit: chunked uploads too.

        A client that does not keep sending (:meth:`Limits.body_deadline_s`) gets 408: a slow
        or stalled sender must not hold a slot, which other senders wait for.
        """
        body = bytearray()
        limit, limits = self.max_body_bytes, self.limits
        stream = request.stream()
        start = asyncio.get_running_loop().time()
        deadline_s = limits.body_deadline_s(0)
        try:
            async with asyncio.timeout_at(start + deadline_s) as timer:
                async for chunk in stream:
                    body += chunk
                    if len(body) > limit:
                        break
                    deadline_s = limits.body_deadline_s(len(body))
                    timer.reschedule(start + deadline_s)
                else:
                    return bytes(body)
        except TimeoutError:
            message = f"body not received within {round(deadline_s, 1):g} s"
            raise BatchError(408, message, _CLOSE) from None
        await _drain(stream)
        raise BatchError(413, f"body exceeds the limit of {limit} bytes", _CLOSE)

    def _decode_and_add(self, body: bytes, encoding: str | None) -> tuple[int, int]:
        """Check the batch (BatchError if it is refused), store it: (accepted, inserted).

        One trip to the thread pool for both: each trip costs a hand-over between threads.
        """
        records = parse_batch_rows(inflate(body, encoding, self.max_body_bytes))
        inserted = self.store.add(records, live=True)
        if inserted and self.sealer is not None:
            self.sealer.wrote()
        return len(records), inserted

    async def get_records(self, request: Request) -> Response:
        """A page of a run's records newer than ``since``, each with its store ``id``."""
        if not self._authorised(request):
            return self._denied()
        try:
            flt = records_filter(request.query_params)
        except QueryError as exc:
            return _error(400, str(exc))
        pairs = await run_in_threadpool(self.store.id_records, flt)
        records = [{"id": rec_id, **wire.to_dict(rec)} for rec_id, rec in pairs]
        last = pairs[-1][0] if pairs else flt.after_id
        return JSONResponse({"records": records, "next": last, "more": len(pairs) == flt.limit})

    async def get_runs(self, request: Request) -> Response:
        """Every run the store holds, as ``dsmon.store.records.runs.RunInfo`` objects."""
        if not self._authorised(request):
            return self._denied()
        infos = await run_in_threadpool(self.store.runs)
        return JSONResponse({"runs": [dataclasses.asdict(info) for info in infos]})

    async def healthz(self, request: Request) -> Response:
        """200 when the store takes writes (a readiness probe), 503 with the reason otherwise.

        Reads alone say little: a full disk, a read-only mount or a corrupt file still
        answer them. So the store must commit a probe write (at most every
        ``PROBE_EVERY_S``), and a batch that failed to store in the last
        ``WRITE_FAILURE_HOLD_S``, with none stored since, fails the check too.
        """
        try:
            last_id = await run_in_threadpool(self.store.last_id)
        except _STORE_ERRORS as exc:
            return _unhealthy(f"store: {_one_line(exc)}")
        problem = await self._write_problem()
        if problem is not None:
            return _unhealthy(problem)
        return JSONResponse({"status": "ok", "last_id": last_id})

    async def _write_problem(self) -> str | None:
        """Why writes fail now, or None: the probe's answer, then the last batch's."""
        now = time.monotonic()
        at, problem = self._probed
        if now - at >= PROBE_EVERY_S:
            try:
                await run_in_threadpool(self.store.check_writable)
                problem = None
            except _STORE_ERRORS as exc:
                problem = f"store does not take writes: {_one_line(exc)}"
            self._probed = (now, problem)
        failed = self._write_failed
        if problem is None and failed is not None and now - failed[0] < WRITE_FAILURE_HOLD_S:
            problem = f"storing a batch failed {now - failed[0]:.0f} s ago: {failed[1]}"
        return problem

    async def metrics(self, request: Request) -> Response:
        """Prometheus text exposition of the store's newest figures and of this server."""
        if not self.metrics_public and not self._authorised(request):
            return self._denied()
        text = await run_in_threadpool(generate_latest, self.registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)


# The rest of a body not read to its end would be taken for the next request.
_CLOSE = {"Connection": "close"}
#: What is read and dropped of a body past the limit before the 413 goes out (and how long):
#: closing a socket with unread data resets the connection, and a client still sending then
#: gets "connection reset" instead of the answer that tells it not to send that batch again.
DRAIN_BYTES = 4 * 1024 * 1024
DRAIN_S = 1.0


async def _drain(stream: AsyncIterator[bytes]) -> None:
    """Read and drop the rest of a refused body, up to DRAIN_BYTES or DRAIN_S."""
    dropped = 0
    try:
        async with asyncio.timeout(DRAIN_S):
            async for chunk in stream:
                dropped += len(chunk)
                if dropped > DRAIN_BYTES:
                    return
    except (TimeoutError, ClientDisconnect):
        return  # the 413 goes out all the same (a client that left never reads it)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _unhealthy(reason: str) -> JSONResponse:
    return JSONResponse({"status": "error", "error": reason}, 503)


async def _store_failed(request: Request, exc: Exception) -> Response:
    """A read the store could not answer: 503, so scripts and Prometheus retry later."""
    logger.warning("dsmon ingest: %s %s: store failed: %s", request.method, request.url.path, exc)
    return _error(503, f"store: {_one_line(exc)}", {"Retry-After": "5"})


def create_app(
    store: Store,
    token: str,
    limits: Limits | None = None,
    *,
    metrics_public: bool = True,
    health: RuleStates | None = None,
    sealer: PageSealer | None = None,
) -> Starlette:
    """The ingest ASGI application over ``store``.

    Args:
        store: where records go; the caller keeps ownership (the app never closes it).
        token: the bearer token clients must present (16 characters or more).
        limits: body size, concurrency and time limits (default: :class:`Limits`).
        metrics_public: serve ``/metrics`` without the token (Prometheus scrapes usually
            come from inside the cluster); the other data endpoints always need it.
        health: the health rules' statuses to export as ``dsmon_health_rule`` (kept
            current by a :class:`dsmon.watch.health.HealthWatcher`); None: not exported.
        sealer: told of each write that stored records (``dsmon.serve.seal``); the caller
            stops it before closing the store. None: no page is kept by the server.

    Raises:
        dsmon.serve.tokens.TokenError: the token is too short to be a secret.
    """
    api = IngestApi(store, token, limits or Limits(), metrics_public, health, sealer)
    routes = [
        Route("/v1/records", api.post_records, methods=["POST"]),
        Route("/v1/records", api.get_records, methods=["GET"]),
        Route("/v1/runs", api.get_runs, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
    ]
    handlers = dict.fromkeys(_STORE_ERRORS, _store_failed)
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.state.api = api
    return app
