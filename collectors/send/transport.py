"""How a batch of records travels to the dashboard: one HTTP(S) POST to ``/v1/records``.

Kept apart from the sender so the sender's delivery rules (spool, backoff, splitting a batch
the server refuses) can be tested on their own, and so a second transport could be added
without touching them. The standard library's ``http.client`` is enough: one kept-alive
connection per collector, no extra dependency on the nodes.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

#: Where records are POSTed when the URL names only the dashboard.
INGEST_PATH = "/v1/records"


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """What the server answered."""

    status: int
    reason: str
    body: bytes


class Transport(Protocol):
    """Delivers one gzipped JSON-lines body; raises ``OSError`` when the server is unreachable."""

    url: str

    def post(self, body: bytes, timeout_s: float | None = None) -> HttpResponse:
        """POST the body and return the answer, whatever its status.

        Args:
            body: the gzipped JSON lines.
            timeout_s: a shorter limit for this request (a stop's deadline), else the
                transport's own.
        """
        ...

    def abort(self) -> None:
        """From another thread: fail the request in flight and any later one (a stop's end)."""
        ...


def ingest_url(url: str) -> str:
    """The ingest endpoint for a dashboard URL: ``http://host:8501`` -> ``.../v1/records``."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: expected http(s)://host[:port][/path]")
    path = parts.path.rstrip("/")
    if not path.endswith(INGEST_PATH):
        path += INGEST_PATH
    return f"{parts.scheme}://{parts.netloc}{path}"


class UrlTransport:
    """POSTs to the ingest endpoint over one reused connection.

    A kept-alive connection that the server closed in the meantime fails on first use; that
    one failure is retried at once on a fresh connection, so it does not count as an outage.

    Args:
        url: the dashboard's base URL or its ingest endpoint.
        token: the bearer token.
        timeout_s: connect and read timeout of one request.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0) -> None:
        self.url = ingest_url(url)
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = parts.path
        self._timeout_s = timeout_s
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-ndjson",
            "Content-Encoding": "gzip",
        }
        self._conn: http.client.HTTPConnection | None = None
        self._aborted = False

    def post(self, body: bytes, timeout_s: float | None = None) -> HttpResponse:
        """POST once, retrying once at once if a reused connection turned out stale."""
        limit = self._timeout_s if timeout_s is None else min(timeout_s, self._timeout_s)
        reused = self._conn is not None
        try:
            return self._request(body, limit)
        except OSError:
            if not reused or self._aborted:
                raise
        return self._request(body, limit)

    def abort(self) -> None:
        """Shut the connection down under a request that waits on a server gone silent.

        Called from another thread when a stop's grace period is over: ``shutdown`` wakes a
        blocked read at once, where closing the socket would not. Later requests fail too.
        """
        self._aborted = True
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Drop the connection (the next post opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _request(self, body: bytes, timeout_s: float) -> HttpResponse:
        if self._aborted:
            raise OSError("aborted: the stop's grace period is over")
        conn = self._conn or self._connect()
        conn.timeout = timeout_s  # used when it connects
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        try:
            conn.request("POST", self._path, body=body, headers=self._headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise OSError(f"{type(exc).__name__}: {exc}") from exc
        if resp.will_close:
            self.close()
        return HttpResponse(resp.status, resp.reason, data)

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            self._conn = http.client.HTTPSConnection(
                self._host,
                self._port,
                timeout=self._timeout_s,
                context=ssl.create_default_context(),
            )
        else:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        return self._conn
