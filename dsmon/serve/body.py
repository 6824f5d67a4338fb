"""A POSTed body before it is parsed: its declared size, its gzip encoding, or why it is refused.

The body comes from the network, so it is bounded before and after decompression: a 1 MiB
gzip bomb inflates to 1 GiB, and a body of many tiny gzip members costs a new inflater each.
``dsmon.serve.batch`` then checks the lines one by one.
"""

from __future__ import annotations

import zlib

#: Most gzip members in one body (``cat a.gz b.gz`` sends two; senders send one).
MAX_GZIP_MEMBERS = 64
#: Compressed bytes handed to the inflater at a time (bounds what each member copies).
_INFLATE_CHUNK = 64 * 1024


class BatchError(Exception):
    """A refused batch: the HTTP ``status`` to answer and a one-line reason for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def check_length(content_length: str | None, limit: int) -> None:
    """Refuse a body by its declared size before reading it (413), or a bad header (400)."""
    if content_length is None:
        return
    try:
        size = int(content_length)
    except ValueError:
        raise BatchError(400, f"Content-Length: not a number: {content_length!r}") from None
    if size > limit:
        raise BatchError(413, f"body of {size} bytes exceeds the limit of {limit} bytes")


def inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body after ``Content-Encoding``, never more than ``limit`` bytes of it.

    Decompression stops as soon as the output passes the limit, so a bomb costs at most
    ``limit`` bytes of memory. Concatenated gzip members are accepted (``cat a.gz b.gz``), at
    most :data:`MAX_GZIP_MEMBERS` of them: each member starts a new inflater, and a body of
    thousands of empty members would otherwise keep the server busy for minutes.

    Raises:
        BatchError: 413 when the inflated body is too large, 415 for an unknown encoding,
            400 for a corrupt or truncated gzip stream or too many members.
    """
    enc = (encoding or "identity").strip().lower()
    if enc == "identity":
        return body
    if enc not in ("gzip", "x-gzip"):
        raise BatchError(415, f"Content-Encoding {encoding!r} is not supported (use gzip)")
    whole = _one_member(body, limit)
    if whole is not None:
        return whole
    out = bytearray()
    view, pos, members = memoryview(body), 0, 0
    while pos < len(body):
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise BatchError(400, f"gzip body: more than {MAX_GZIP_MEMBERS} gzip members")
        pos = _inflate_member(view, pos, out, limit)
    return bytes(out)


def _one_member(body: bytes, limit: int) -> bytes | None:
    """The body inflated in one call, if it is one whole gzip member within ``limit``; else None.

    What a sender sends: its inflated bytes are then returned as the inflater made them,
    not copied in chunks onto a buffer and copied again (a tenth of inflating). Anything
    else (several members, a corrupt or truncated stream, too much) is None, for
    :func:`inflate` to take member by member and explain.
    """
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        whole = inflater.decompress(body, limit + 1)
    except zlib.error:
        return None
    if inflater.eof and not inflater.unused_data and len(whole) <= limit:
        return whole
    return None


def _inflate_member(body: memoryview, pos: int, out: bytearray, limit: int) -> int:
    """Inflate the gzip member at ``body[pos:]`` onto ``out``; returns where the next starts.

    The input goes in chunks, so what the inflater copies past the member's end is one
    chunk at most rather than the whole rest of the body.
    """
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    while not inflater.eof:
        if pos >= len(body):
            raise BatchError(400, "gzip body: truncated stream")
        chunk = body[pos : pos + _INFLATE_CHUNK]
        pos += len(chunk)
        try:
            out += inflater.decompress(chunk, limit + 1 - len(out))
        except zlib.error as exc:
            raise BatchError(400, f"gzip body: {exc}") from None
        if len(out) > limit:
            raise BatchError(413, f"body inflates to more than the limit of {limit} bytes")
    return pos - len(inflater.unused_data)
