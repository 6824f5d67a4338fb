"""The stored key of a record's identity: 24 bytes that sort with the record's place in its log.

The key's layout is made for the speed of inserts (see :func:`identity_digest`) and fixed by
the schema version (:mod:`dsmon.store.schema`): a dsmon that keys records otherwise writes
another schema. Every stored row gets its key here (:func:`dsmon.store.records.rows.record_row`),
and the ingest server keys a checked line with it without building the record.
"""

from __future__ import annotations

import functools
from hashlib import blake2b as _blake2b
from typing import NamedTuple

from dsmon.model.records import Record, record_key


def key_digest(rec: Record) -> bytes:
    """The record's identity as a compact UNIQUE key for any backend (:func:`identity_digest`)."""
    return identity_digest(*record_key(rec))


#: Bytes of a key: where the record came from, its place there, its whole identity (8 each).
KEY_BYTES = 24
_MAX_ORDER = (1 << 64) - 1
#: Places below this the key's second part holds exactly (:func:`place_key`).
MAX_PLACE = _MAX_ORDER
_DIGITS = frozenset("0123456789")
#: Places whose number the key holds exactly: a byte offset, a line.
_EXACT = ("o", "l")


def identity_digest(
    run: str, node: str, file: str, pos: str, sub: int, kind: str, order: int | None = None
) -> bytes:
    """The key of a record's identity (``record_key``'s tuple), in three 8-byte parts.

    A digest of the whole identity alone lands each new record at a random place in the
    UNIQUE index: at 300k records that was 9 of an insert's 15 us, and it grows with the
    store. So the key starts with a digest of the source (run, node, file) and the record's
    place in it (byte offset, line, or time), big-endian: a log's records sort in the order
    they are written, and each insert lands next to the one before. The last part keeps
    apart the records of one place (several from one line): see :func:`place_key` for a
    place the second part holds exactly (a byte offset or a line number, nearly every
    record), else a digest of the whole identity. ``order``, when the caller has it, is
    ``position_order(pos)``.
    """
    if order is None:
        order = position_order(pos)
    head = source_head(run, node, file)
    if 0 <= order < _MAX_ORDER and pos[:1] in _EXACT and pos[1:] == str(order):
        return place_key(head, pos[0], order, sub, kind)
    return source_key(head, pos, sub, kind, order)


class SourceHead(NamedTuple):
    """What the keys of every record of one source (run, node, file) share, made once."""

    digest: bytes  # the key's first part
    identity: str  # the start of the identity the last part digests
    #: :func:`place_key`'s last parts, by (o or l, sub, kind): a source has a few of them.
    tails: dict[tuple[str, int, str], bytes]


def source_head(run: str, node: str, file: str) -> SourceHead:
    """The shared parts of the keys of one source's records (see :func:`source_key`)."""
    return _source_head(run, node, file)


def place_key(head: SourceHead, form: str, number: int, sub: int, kind: str) -> bytes:
    r"""The key of the record at byte offset (``form`` ``o``) or line ``l`` ``number``.

    Such a place is ``o<number>`` or ``l<number>`` and the key's second part holds
    ``number`` exactly (0 <= number < 2**64 - 1), so the last part needs to tell apart only
    what the place does not say: offset or line, ``sub`` and ``kind``. Its digest is made
    once per source and (form, sub, kind), not once per record (a blake2b a record was a
    microsecond of the ingest server's). Its text starts with ``\x1e`` where the whole
    identity's (:func:`source_key`) has the place, so the two never digest the same text.
    """
    tail = head.tails.get((form, sub, kind))
    if tail is None:
        text = f"{head.identity}\x1e{form}\x1f{sub}\x1f{kind}".encode()
        tail = head.tails[(form, sub, kind)] = _blake2b(text, digest_size=8).digest()
    return head.digest + number.to_bytes(8, "big") + tail


def source_key(head: SourceHead, pos: str, sub: int, kind: str, order: int) -> bytes:
    """The key of a record whose place the key's second part does not hold exactly.

    A time (``t<ts>``, cut to 19 digits), a negative or huge offset: the last part is a
    digest of the whole identity. ``order`` is the record's :func:`position_order`.
    """
    place = (order if 0 <= order < _MAX_ORDER else _MAX_ORDER).to_bytes(8, "big")
    whole = f"{head.identity}{pos}\x1f{sub}\x1f{kind}".encode()
    return head.digest + place + _blake2b(whole, digest_size=8).digest()


@functools.lru_cache(maxsize=4096)
def _source_head(run: str, node: str, file: str) -> SourceHead:
    """A source's shared key parts; cached, as a batch or a log holds the lines of a few files."""
    return SourceHead(_source_digest(run, node, file), f"{run}\x1f{node}\x1f{file}\x1f", {})


@functools.lru_cache(maxsize=4096)
def _source_digest(run: str, node: str, file: str) -> bytes:
    """The first part of a key; cached, as a batch holds the lines of a few files."""
    return _blake2b(f"{run}\x1f{node}\x1f{file}".encode(), digest_size=8).digest()


def position_order(pos: str) -> int:
    """A number that grows with a record's place in its source (``source_position``'s text).

    ``o<offset>`` and ``l<line>`` give the number; a time (``t<ts>``, a GPU sample's
    ``g<index>@<ts>``) gives its digits as one number, padded so that a longer fraction of a
    second sorts after a shorter one. Anything else gives 0: the key stays unique, only
    its place in the index is random.
    """
    if pos[:1] in ("o", "l") and pos[1:].isascii() and pos[1:].isdigit():
        return int(pos[1:])
    digits = "".join(c for c in pos.partition("@")[2] or pos[1:] if c in _DIGITS)[:19]
    return int(digits.ljust(19, "0")) if digits else 0
