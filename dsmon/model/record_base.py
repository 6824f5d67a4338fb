"""What every record is: its :class:`Source` and the fields of :class:`Record`.

Apart from :mod:`dsmon.model.records` because the record kinds are defined in several
modules (:mod:`dsmon.model.measured`, :mod:`dsmon.model.flops_records` and ``records``
itself), and each needs these two classes without importing the catalogue of kinds, which
imports them all.

Every record carries its :class:`Source`, so it can be traced to the line that produced it
and stored exactly once (see :func:`dsmon.model.records.record_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a record came from.

    ``line`` is the 1-based physical line number, ``offset`` the byte offset of that line's
    start in ``file``; ``sub`` tells apart several records made from one line (e.g. a comms
    table row and its op header). Together with ``run``, ``node`` and ``file`` they are the
    record's identity: re-reading the same bytes yields the same keys, so ingest is idempotent.
    """

    run: str
    file: str | None = None
    line: int | None = None
    offset: int | None = None
    node: str | None = None
    rank: int | None = None
    sub: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """Fields every record has.

    ``ts`` is ISO-8601 without zone (``2026-11-29T14:10:22.818``) in the clock of the machine
    that wrote the line: DeepSpeed's logger prints local time with no zone, so dsmon keeps it
    as printed. Lines with no timestamp of their own (print() output) inherit the nearest
    preceding one. ``step`` is the 1-based optimizer step the record belongs to, when known
    (see docs/records.md, "Step assignment").
    """

    KIND: ClassVar[str] = ""
    src: Source
    ts: str | None = None
    step: int | None = None
