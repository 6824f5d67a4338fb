"""Running the ingest app under uvicorn: in a thread beside the dashboard, or in the foreground.

``dsmon dashboard`` (and ``dsmon watch``) call :func:`start_ingest_server` and get a handle
whose :meth:`IngestServer.stop` ends the server and closes its store; ``dsmon serve`` calls
:func:`serve_forever`, which returns on Ctrl-C or SIGTERM. The listening socket is bound
before the server thread starts, so a port already in use is an immediate, clear error in the
caller rather than a log line from a background thread, and port 0 picks a free port that
the handle then reports.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from dsmon.serve import DEFAULT_PORT
from dsmon.serve.app import MAX_BODY_BYTES, Limits, create_app
from dsmon.serve.seal import PageSealer
from dsmon.store.store import Store, open_store

if TYPE_CHECKING:  # the health watcher loads pandas: only when alerts are asked for
    from dsmon.watch.health import RuleStates

logger = logging.getLogger(__name__)

#: Collectors keep one connection open and post about once a second; a keep-alive longer
#: than their interval saves a TCP handshake per batch.
KEEP_ALIVE_S = 65
STARTUP_TIMEOUT_S = 15.0


class ServeError(RuntimeError):
    """The ingest server could not start (port taken, store unreachable, ...)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6); port 0 picks a free one.

    Raises:
        ServeError: the address cannot be resolved or is already in use.
    """
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeError(f"ingest server: cannot listen on {host}:{port}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServeError(f"ingest server: cannot listen on {host}:{port}: {exc}") from None
    return sock


def _url(host: str, sock: socket.socket) -> str:
    port = sock.getsockname()[1]
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


class _HeadersDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers never complete.

    uvicorn times out an idle kept-alive connection, but not one that trickles its request
    line and headers a byte at a time, or connects and sends nothing: such clients would
    hold a connection each for ever without ever showing a token. The deadline starts at
    the connection and at the first byte of each later request.
    """

    headers_timeout_s = Limits().headers_timeout_s
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self._between_requests():
            self._arm()
        super().data_received(data)
        if self._deadline is not None and not self._between_requests():
            self._deadline.cancel()
            self._deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.headers_timeout_s, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self._between_requests() and not self.transport.is_closing():
            logger.warning("dsmon ingest: %s: request headers not complete in time", self.client)
            self.transport.close()


def _server(
    store: Store, token: str, host: str, port: int, limits: Limits, health: RuleStates | None
) -> tuple[uvicorn.Server, PageSealer]:
    """A uvicorn server for the app, and the app's page sealer, which the caller stops.

    The server leaves the process's logging configuration alone.
    """
    sealer = PageSealer(store)
    app = create_app(store, token, limits, health=health, sealer=sealer)
    protocol = type(
        "HeadersDeadline", (_HeadersDeadline,), {"headers_timeout_s": limits.headers_timeout_s}
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_S,
        server_header=False,
    )
    return uvicorn.Server(config), sealer


def _limits(limits: Limits | None, max_body_bytes: int) -> Limits:
    return dataclasses.replace(limits or Limits(), max_body_bytes=max_body_bytes)


@dataclass
class IngestServer:
    """A running ingest server thread: where it listens, and how to stop it."""

    url: str
    port: int
    store: Store
    server: uvicorn.Server = field(repr=False)
    thread: threading.Thread = field(repr=False)
    sealer: PageSealer = field(repr=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish the requests in flight, stop listening and keeping pages, close the store."""
        self.server.should_exit = True
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout_s)
        self.sealer.stop(timeout_s)
        self.store.close()

    def __enter__(self) -> IngestServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_ingest_server(
    store_url: str,
    token: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    limits: Limits | None = None,
    health: RuleStates | None = None,
) -> IngestServer:
    """Start the ingest server in a daemon thread; returns once it accepts connections.

    Args:
        store_url: the store to write into (a path, ``sqlite:///...`` or ``postgresql://...``);
            the server opens its own connection and closes it on :meth:`IngestServer.stop`.
        token: the bearer token collectors must send (see ``dsmon.serve.tokens``).
        host: the interface to listen on; ``0.0.0.0`` to accept collectors on other nodes.
        port: the TCP port; 0 picks a free one (``handle.port`` tells which).
        max_body_bytes: the largest request body accepted.
        limits: concurrency and time limits (``limits.max_body_bytes`` is replaced by
            ``max_body_bytes``).
        health: health rule statuses for ``/metrics`` (``dsmon.watch.health``), or None.

    Raises:
        ServeError: the port is taken or the server did not come up.
        dsmon.store.errors.StoreError: the store cannot be opened.
        dsmon.serve.tokens.TokenError: the token is too short.
    """
    store = open_store(store_url)
    try:
        server, sealer = _server(store, token, host, port, _limits(limits, max_body_bytes), health)
        sock = bind_socket(host, port)
    except BaseException:
        store.close()
        raise
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="dsmon-ingest", daemon=True
    )
    thread.start()
    handle = IngestServer(_url(host, sock), sock.getsockname()[1], store, server, thread, sealer)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        handle.stop(timeout_s=1.0)
        sock.close()
        raise ServeError(f"ingest server on {handle.url} did not start")
    logger.info("dsmon ingest server listening on %s", handle.url)
    return handle


def freeze_start_up() -> None:
    """Keep what the process made so far (modules, classes, the app) out of the collector's walks.

    Every batch makes thousands of rows that live until they are stored, so now and then
    the cyclic garbage collector runs a full collection, which walked every object the
    server's start-up made too: in ``dsmon serve``, a process of its own that keeps them
    all until it ends, they are moved to the permanent generation (``gc.freeze``) once, before
    the first request (garbage collected first). Only cycles among them, which live as long
    as the process, are never collected.
    """
    gc.collect()
    gc.freeze()


def serve_forever(
    store_url: str,
    token: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    limits: Limits | None = None,
    on_ready: Callable[[str], None] | None = None,
    health: RuleStates | None = None,
) -> None:
    """Run the ingest server in this thread until Ctrl-C or SIGTERM (``dsmon serve``).

    ``on_ready`` is called with the server's URL once the port is bound. Every answered
    batch is already committed, so being stopped by a signal loses nothing.

    Raises:
        ServeError: the port is taken.
        dsmon.store.errors.StoreError: the store cannot be opened.
    """
    with open_store(store_url) as store:
        server, sealer = _server(store, token, host, port, _limits(limits, max_body_bytes), health)
        sock = bind_socket(host, port)
        if on_ready is not None:
            on_ready(_url(host, sock))
        freeze_start_up()
        try:
            server.run(sockets=[sock])
        finally:
            sealer.stop()
            sock.close()
