"""The ingest HTTP server: collectors POST records here, scripts and Prometheus read from here.

It runs on its own port, next to the Streamlit UI rather than inside it (docs/ingest.md says
why): ``dsmon dashboard`` starts it in a thread with :func:`start_ingest_server`, and
``dsmon serve`` runs it alone for deployments whose UI lives elsewhere.

Endpoints (docs/ingest.md has the details):

- ``POST /v1/records``: JSON lines (``dsmon.wire``), optionally gzipped. 401 without the
  bearer token, 413 over the size limit (declared, streamed or inflated), 400 naming the
  first bad line and field, 503 when the store fails; 200 ``{"accepted", "inserted"}`` only
  after the store committed. A batch is stored whole or not at all, and a replayed batch
  adds nothing, so a sender that retries after a lost answer never duplicates a record.
- ``GET /v1/runs``, ``GET /v1/records?run=&kind=&since=&limit=``: JSON for scripts (token
  required: they expose the training data).
- ``GET /healthz``: whether the store answers. ``GET /metrics``: Prometheus text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import sqlite3
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dsmon import wire
from dsmon.ingest_batch import BatchError, check_length, inflate, parse_batch_encoded
from dsmon.metrics import StoreCollector
from dsmon.records import KINDS
from dsmon.store_schema import EncodedRecord, RecordFilter, Store, StoreError
from dsmon.tokens import check_token, token_matches

logger = logging.getLogger(__name__)

#: Largest request body accepted, before and after gzip: 16 MiB is ~60,000 records.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: Records one ``GET /v1/records`` returns at most (and by default).
MAX_PAGE = 10_000
#: Batches decoded and written at the same time; more wait (the store serialises writes anyway).
BATCHES_IN_HAND = 4
DEFAULT_PAGE = 1_000

# What a store raises when its database is unreachable or busy: the client should retry.
_STORE_ERRORS = (StoreError, sqlite3.Error, OSError)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _QueryError(ValueError):
    """A bad query parameter of a GET request (answered 400)."""


class IngestApi:
    """The endpoints, bound to one store and token; :func:`create_app` wires them up.

    Store calls run in Starlette's thread pool: the stores are thread-safe and blocking, and
    a 16 MiB batch must not stall the event loop that answers the other collectors.
    """

    def __init__(self, store: Store, token: str, max_body_bytes: int, metrics_public: bool) -> None:
        self.store = store
        self.token = check_token(token, "ingest token")
        self.max_body_bytes = max_body_bytes
        self.metrics_public = metrics_public
        # A decoded 16 MiB batch takes ~10x its size in memory: bound how many are in hand.
        self._working = asyncio.Semaphore(BATCHES_IN_HAND)
        self.registry = CollectorRegistry()
        self.registry.register(StoreCollector(store))
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
            body = await self._read_body(request)
        except BatchError as exc:
            return _error(exc.status, exc.message)
        async with self._working:
            return await self._store(body, request.headers.get("content-encoding"))

    async def _store(self, body: bytes, encoding: str | None) -> Response:
        try:
            records = await run_in_threadpool(self._decode, body, encoding)
        except BatchError as exc:
            return _error(exc.status, exc.message)
        try:
            inserted = await run_in_threadpool(
                functools.partial(self.store.add, live=True), records
            )
        except _STORE_ERRORS as exc:
            logger.warning("dsmon ingest: store failed, batch refused with 503: %s", exc)
            return _error(503, f"store: {exc}", {"Retry-After": "5"})
        self.received.labels("accepted").inc(len(records))
        self.received.labels("inserted").inc(inserted)
        return JSONResponse({"accepted": len(records), "inserted": inserted})

    async def _read_body(self, request: Request) -> bytes:
        """The raw body, refused (413) as soon as it passes the limit: chunked uploads too."""
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body_bytes:
                raise BatchError(413, f"body exceeds the limit of {self.max_body_bytes} bytes")
        return bytes(body)

    def _decode(self, body: bytes, encoding: str | None) -> list[EncodedRecord]:
        return parse_batch_encoded(inflate(body, encoding, self.max_body_bytes))

    async def get_records(self, request: Request) -> Response:
        """A page of a run's records newer than ``since``, each with its store ``id``."""
        if not self._authorised(request):
            return self._denied()
        try:
            flt = _records_filter(request.query_params)
        except _QueryError as exc:
            return _error(400, str(exc))
        pairs = await run_in_threadpool(self.store.id_records, flt)
        records = [{"id": rec_id, **wire.to_dict(rec)} for rec_id, rec in pairs]
        last = pairs[-1][0] if pairs else flt.after_id
        return JSONResponse({"records": records, "next": last, "more": len(pairs) == flt.limit})

    async def get_runs(self, request: Request) -> Response:
        """Every run the store holds, as ``dsmon.store.RunInfo`` objects."""
        if not self._authorised(request):
            return self._denied()
        infos = await run_in_threadpool(self.store.runs)
        return JSONResponse({"runs": [dataclasses.asdict(info) for info in infos]})

    async def healthz(self, request: Request) -> Response:
        """200 when the store answers (a readiness probe), 503 with the reason otherwise."""
        try:
            last_id = await run_in_threadpool(self.store.last_id)
        except _STORE_ERRORS as exc:
            return JSONResponse({"status": "error", "error": f"store: {exc}"}, 503)
        return JSONResponse({"status": "ok", "last_id": last_id})

    async def metrics(self, request: Request) -> Response:
        """Prometheus text exposition of the store's newest figures and of this server."""
        if not self.metrics_public and not self._authorised(request):
            return self._denied()
        text = await run_in_threadpool(generate_latest, self.registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)


async def _store_failed(request: Request, exc: Exception) -> Response:
    """A read the store could not answer: 503, so scripts and Prometheus retry later."""
    logger.warning("dsmon ingest: %s %s: store failed: %s", request.method, request.url.path, exc)
    return _error(503, f"store: {exc}", {"Retry-After": "5"})


def _records_filter(params: Any) -> RecordFilter:
    """The store query a ``GET /v1/records`` asks for; raises :class:`_QueryError`."""
    run = params.get("run")
    if not run:
        raise _QueryError("query 'run': required")
    kind = params.get("kind") or None
    if kind is not None and kind not in KINDS:
        raise _QueryError(f"query 'kind': unknown record kind {kind!r}")
    since = _int_param(params, "since", 0, 0, None)
    limit = _int_param(params, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    return RecordFilter(run, kind, after_id=since, limit=limit)


def _int_param(params: Any, name: str, default: int, low: int, high: int | None) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _QueryError(f"query {name!r}: not an integer: {raw!r}") from None
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f"..{high}"
        raise _QueryError(f"query {name!r}: {value} outside {low}{upper}")
    return value


def create_app(
    store: Store,
    token: str,
    max_body_bytes: int = MAX_BODY_BYTES,
    *,
    metrics_public: bool = True,
) -> Starlette:
    """The ingest ASGI application over ``store``.

    Args:
        store: where records go; the caller keeps ownership (the app never closes it).
        token: the bearer token clients must present (16 characters or more).
        max_body_bytes: the largest body accepted, compressed and inflated alike.
        metrics_public: serve ``/metrics`` without the token (Prometheus scrapes usually
            come from inside the cluster); the other data endpoints always need it.

    Raises:
        dsmon.tokens.TokenError: the token is too short to be a secret.
    """
    api = IngestApi(store, token, max_body_bytes, metrics_public)
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
