"""What the store knows about each run, from its bookkeeping tables rather than its records.

Every write updates, in the same transaction as the records, ``run_kinds`` (per run and kind:
count, first and last time, last step, last id), ``run_sources`` (the (run, node, rank) seen)
and ``run_activity`` (when a live sender last wrote, how many rows had their step filled in
later), so the run list and a page's "anything new?" never scan the records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from dsmon.model.units import parse_ts


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the store knows about one run, cheap enough to ask on every dashboard refresh.

    ``last_step`` is the highest step the records name, heartbeats aside (:data:`IN_PROGRESS`).
    ``kinds`` counts records per kind; ``last_id`` is the id of the newest record, so a
    reader can ask for ``records(run, after_id=last_id)`` next time and get only what is new.
    ``received_at`` is when a live sender (the ingest server, the demo's replay) last stored
    records of the run, in this machine's local time: DeepSpeed prints many lines without a
    timestamp (timer lines, all of them at its default log level), so the records' own
    ``last_ts`` can stand still for hours while the run is well alive.
    """

    name: str
    first_ts: str | None
    last_ts: str | None
    n_records: int
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]
    last_step: int | None
    kinds: dict[str, int] = field(default_factory=dict)
    last_id: int = 0
    received_at: str | None = None


class KindStats(NamedTuple):
    """One (run, kind) line of the per-run bookkeeping table."""

    run: str
    kind: str
    n: int
    first_ts: str | None
    last_ts: str | None
    last_step: int | None
    last_id: int


#: Kinds whose ``step`` is the step a rank is in, not one it finished: a rank's ``exited``
#: heartbeat names the step after its last, which never ran, so a run's ``last_step`` (the
#: status line, ``dsmon_run_last_step``) leaves them out.
IN_PROGRESS = frozenset({"heartbeat"})


def received_now() -> str:
    """The receive time noted for a live batch: local wall clock, as records' ``ts``."""
    return datetime.now().isoformat(timespec="milliseconds")


def run_infos(
    stats: Iterable[KindStats],
    sources: Iterable[tuple[str, Any, Any]],
    activity: dict[str, tuple[int, str | None]],
) -> list[RunInfo]:
    """Per-kind statistics and the (run, node, rank) seen, as one RunInfo per run, by name."""
    nodes: dict[str, set[str]] = {}
    ranks: dict[str, set[int]] = {}
    for run, node, rank in sources:
        if node is not None and node != "":
            nodes.setdefault(run, set()).add(str(node))
        if rank is not None and rank >= 0:
            ranks.setdefault(run, set()).add(int(rank))
    by_run: dict[str, list[KindStats]] = {}
    for st in stats:
        by_run.setdefault(st.run, []).append(st)
    received = {run: at for run, (_, at) in activity.items()}
    return [
        _run_info(name, rows, nodes.get(name, set()), ranks.get(name, set()), received.get(name))
        for name, rows in sorted(by_run.items())
    ]


def _run_info(
    name: str, rows: list[KindStats], nodes: set[str], ranks: set[int], received_at: str | None
) -> RunInfo:
    """One run's RunInfo from its per-kind rows.

    A time no calendar has (``2026-19-39``, see :func:`dsmon.model.units.parse_ts`) is left
    out: it would sort as the run's newest and break every reader that computes with it.
    """
    firsts = [r.first_ts for r in rows if r.first_ts is not None and parse_ts(r.first_ts)]
    lasts = [r.last_ts for r in rows if r.last_ts is not None and parse_ts(r.last_ts)]
    steps = [r.last_step for r in rows if r.last_step is not None and r.kind not in IN_PROGRESS]
    return RunInfo(
        name=name,
        first_ts=min(firsts) if firsts else None,
        last_ts=max(lasts) if lasts else None,
        n_records=sum(r.n for r in rows),
        nodes=tuple(sorted(nodes)),
        ranks=tuple(sorted(ranks)),
        last_step=max(steps) if steps else None,
        kinds={r.kind: r.n for r in sorted(rows, key=lambda r: r.kind)},
        last_id=max(r.last_id for r in rows),
        received_at=received_at,
    )
