"""The query parameters of ``GET /v1/records``: checked and bounded before the store is asked.

Apart from :mod:`dsmon.serve.app` because they are plain functions of the parameters, with
no request, store or event loop behind them: the bounds a client's query must keep (a known
kind, a page of at most :data:`MAX_PAGE`, an id the stores can hold) read in one place, away
from the endpoints' handling of tokens, bodies and store failures.
"""

from __future__ import annotations

from typing import Any

from dsmon.model.records import KINDS
from dsmon.store.records.filter import RecordFilter

#: Records one ``GET /v1/records`` returns at most (and by default).
MAX_PAGE = 10_000
DEFAULT_PAGE = 1_000
#: Largest ``since`` id: the stores' ids are 64-bit integers.
MAX_ID = 2**63 - 1


class QueryError(ValueError):
    """A bad query parameter of a GET request (answered 400)."""


def records_filter(params: Any) -> RecordFilter:
    """The store query a ``GET /v1/records`` asks for; raises :class:`QueryError`."""
    run = params.get("run")
    if not run:
        raise QueryError("query 'run': required")
    kind = params.get("kind") or None
    if kind is not None and kind not in KINDS:
        raise QueryError(f"query 'kind': unknown record kind {kind!r}")
    since = _int_param(params, "since", 0, 0, MAX_ID)
    limit = _int_param(params, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
    return RecordFilter(run, kind, after_id=since, limit=limit)


def _int_param(params: Any, name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if len(raw) > 20:  # int() of a long digit string is slow, and no valid value is so long
        raise QueryError(f"query {name!r}: outside {low}..{high}")
    try:
        value = int(raw)
    except ValueError:
        raise QueryError(f"query {name!r}: not an integer: {raw!r}") from None
    if not low <= value <= high:
        raise QueryError(f"query {name!r}: {value} outside {low}..{high}")
    return value
