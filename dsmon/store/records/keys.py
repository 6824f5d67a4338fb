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
_DIGITS = frozenset("0123456789")


def identity_digest(
    run: str, node: str, file: str, pos: str, sub: int, kind: str, order: int | None = None
) -> bytes:
    """The key of a record's identity (``record_key``'s tuple), in three 8-byte parts.

    A digest of the whole identity alone lands each new record at a random place in the
    UNIQUE index: at 300k records that was 9 of an insert's 15 us, and it grows with the
    store. So the key starts with a digest of the source (run, node, file) and the record's
    place in it (byte offset, line, or time), big-endian: a log's records sort in the order
    they are written, and each insert lands next to the one before. The last part, a digest
    of the whole identity, keeps apart the records of one place (several from one line).
    Apart from :func:`key_digest` so that the ingest server can key a checked line without
    building its record; ``order``, when the caller has it, is ``position_order(pos)``
    (the server keys a line by its offset or line number without reading them back from
    ``pos``: a third of a microsecond of each received record).
    """
    whole = f"{run}\x1f{node}\x1f{file}\x1f{pos}\x1f{sub}\x1f{kind}".encode()
    if order is None:
        order = position_order(pos)
    place = (order if order < _MAX_ORDER else _MAX_ORDER).to_bytes(8, "big")
    return _source_digest(run, node, file) + place + _blake2b(whole, digest_size=8).digest()


class SourceHead(NamedTuple):
    """What the keys of every record of one source (run, node, file) share, made once."""

    digest: bytes  # the key's first part
    identity: str  # the start of the identity the last part digests


def source_head(run: str, node: str, file: str) -> SourceHead:
    """The shared parts of the keys of one source's records (see :func:`source_key`)."""
    return SourceHead(_source_digest(run, node, file), f"{run}\x1f{node}\x1f{file}\x1f")


def source_key(head: SourceHead, pos: str, sub: int, kind: str, order: int) -> bytes:
    """:func:`identity_digest` of a record of the source ``head`` stands for.

    The ingest server keys a batch's lines source by source: the source's digest and the
    start of its identity are made once per source and batch, not once per record. ``order``
    is the record's place (offset or line number) when it is >= 0, else
    :func:`position_order` of ``pos``.
    """
    place = (order if order < _MAX_ORDER else _MAX_ORDER).to_bytes(8, "big")
    whole = f"{head.identity}{pos}\x1f{sub}\x1f{kind}".encode()
    return head.digest + place + _blake2b(whole, digest_size=8).digest()


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
