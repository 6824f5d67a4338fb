"""The SQL of the timer tables, written once for SQLite and PostgreSQL.

DeepSpeed prints three timer lines per optimizer step with ``wall_clock_breakdown`` (the
micro-batch, the global and the ZeRO optimizer's): three million timer records at a million
steps. The health checklist reads one thing of most of them, the step breakdown
(:func:`dsmon.analysis.steps.step_breakdown`: one row per step and rank of the global timers,
with the ZeRO optimizer's beside them). Folding it from the records took most of a long run's
first look, and grew with the run. So each write brings its new timer records into these
tables, in the same transaction (:mod:`dsmon.store.timers.tables`), and the checklist reads
the breakdown from them:

- ``timer_steps``: one row per (step, rank) of the ``global`` timer lines, the last record of
  it (the highest id): the five phase timers. A rank the line did not name is
  :data:`NO_RANK` (a key column cannot be NULL), which sorts after every rank, as a
  breakdown puts an unknown rank.
- ``timer_optimizer_steps``: the same of the ``zero_optimizer`` lines: ZeRO-1/2's three
  optimizer timers.
- ``timer_names``: each timer name a group of the run printed, in any record, and "" for
  each group it printed a line of: which columns the run's timer frame has (a breakdown
  carries an optimizer timer only when the frame has its column), and which groups it
  printed at all.
- ``timer_blocks``: the rows of each whole block of ``blocks.BLOCK_STEPS`` steps, joined
  as :data:`PAGE` reads them, packed in one value (:mod:`dsmon.store.blocks`) once the
  run is ``blocks.SEAL_AFTER`` steps past the block: a million steps' rows are read as 245
  values, not a million rows (a row costs a reader about as much as the record's Arrow row
  did). A write that changes a step of a packed block drops it, and packs it again once the
  run is past it again.
- ``timer_unplaced``: the ``global`` timer records stored without a step (a live collector
  sends a line before the log named its step; the store fills the step in later). A
  breakdown keeps such rows at its end, which these tables cannot: while a run has any, the
  reader folds the records instead.

The records stay in ``records`` as the record of truth; these tables can always be rebuilt
from them.
"""

from __future__ import annotations

from dsmon.store import blocks
from dsmon.store.dialect import Dialect

#: Engine timers in the order of a step; ``bwd_inner``/``bwd_allreduce`` are parts of ``bwd``
#: (:mod:`dsmon.analysis.steps` reads them from here).
PHASES = ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step")
#: ZeRO-1/2 optimizer timers, merged into the breakdown when the log has them.
OPTIMIZER_TIMERS = ("optimizer_allgather", "optimizer_gradients", "optimizer_step")
#: The timer group of each table, and the timers it keeps (as the breakdown's ``<name>_ms``).
GLOBAL, OPTIMIZER = "global", "zero_optimizer"
TABLES = {GLOBAL: ("timer_steps", PHASES), OPTIMIZER: ("timer_optimizer_steps", OPTIMIZER_TIMERS)}
#: The timer kind's records: the kind these tables summarise.
TIMER_KIND = "timer"
#: The rank of a line that named none: after every real rank, as a breakdown sorts it.
NO_RANK = 2**62
#: The table of packed blocks (:mod:`dsmon.store.blocks`).
BLOCKS_TABLE = "timer_blocks"


def _cols(timers: tuple[str, ...]) -> list[str]:
    return [f"{t}_ms" for t in timers]


def ddl(d: Dialect) -> tuple[str, ...]:
    """The timer tables (see docs/store.md)."""
    i, r, t = d.integer, d.real, d.text
    out = []
    for table, timers in TABLES.values():
        values = ", ".join(f"{c} {r}" for c in _cols(timers))
        out.append(
            f"""CREATE TABLE IF NOT EXISTS {table} (
            run {t} NOT NULL, step {i} NOT NULL, rank {i} NOT NULL, id {i} NOT NULL,
            {values},
            PRIMARY KEY (run, step, rank)
        ){d.keyed}"""
        )
        out.append(f"CREATE INDEX IF NOT EXISTS {table}_run_id ON {table} (run, id)")
    out.append(
        f"""CREATE TABLE IF NOT EXISTS timer_names (
            run {t} NOT NULL, grp {t} NOT NULL, name {t} NOT NULL,
            PRIMARY KEY (run, grp, name)
        ){d.keyed}"""
    )
    out.append(blocks.ddl(d, BLOCKS_TABLE))
    out.append(
        f"""CREATE TABLE IF NOT EXISTS timer_unplaced (
            run {t} NOT NULL, id {i} NOT NULL,
            PRIMARY KEY (run, id)
        ){d.keyed}"""
    )
    return tuple(out)


def new_timer_records(d: Dialect) -> str:
    """The timer records a write stored after id ``?``: id, run, step, rank and body.

    The write's id range, not a (run, kind) index (as the per-rank tables read theirs).
    """
    return f"""
SELECT id, run, step, rank, body FROM records{d.not_indexed}
WHERE id > ? AND kind = '{TIMER_KIND}' ORDER BY id
"""


def stored_timer_records(n: int) -> str:
    """The stored timer records of ``n`` keys (``?`` each): those a write did not add.

    A record sent again with the step it lacked when first stored fills it in place
    (a restamp): its timers are placed now, under its first id. In no order: the upsert
    keeps the highest id whatever the order (sorting would cost a sort of ``records``).
    """
    marks = ", ".join(["?"] * n)
    return f"""
SELECT id, run, step, rank, body FROM records
WHERE key IN ({marks}) AND kind = '{TIMER_KIND}' AND step IS NOT NULL
"""


def upsert(group: str) -> str:
    """Upsert a table's rows (run, step, rank, id, timers...): the highest id wins."""
    table, timers = TABLES[group]
    cols = ["run", "step", "rank", "id", *_cols(timers)]
    marks = ", ".join(["?"] * len(cols))
    updated = ", ".join(f"{c} = excluded.{c}" for c in cols[3:])
    return f"""
INSERT INTO {table} ({", ".join(cols)}) VALUES ({marks})
ON CONFLICT (run, step, rank) DO UPDATE SET {updated} WHERE excluded.id > {table}.id
"""


INSERT_NAMES = """
INSERT INTO timer_names (run, grp, name) VALUES (?, ?, ?) ON CONFLICT (run, grp, name) DO NOTHING
"""
INSERT_UNPLACED = "INSERT INTO timer_unplaced (run, id) VALUES (?, ?) ON CONFLICT DO NOTHING"
DELETE_UNPLACED = "DELETE FROM timer_unplaced WHERE run = ? AND id = ?"

#: A run's timer names by group.
NAMES = "SELECT grp, name FROM timer_names WHERE run = ?"
#: Whether a run has a ``global`` timer record without a step.
ANY_UNPLACED = "SELECT 1 FROM timer_unplaced WHERE run = ? LIMIT 1"

_G, _O = TABLES[GLOBAL][0], TABLES[OPTIMIZER][0]
#: The breakdown's columns as :data:`PAGE` gives them.
READ_COLUMNS = ("step", "rank", "id", *_cols(PHASES), *_cols(OPTIMIZER_TIMERS))
#: A page of a run's breakdown rows after a (step, rank) and before a step, in the
#: breakdown's order.
PAGE = f"""
SELECT g.step, g.rank, g.id, {", ".join(f"g.{c}" for c in _cols(PHASES))},
       {", ".join(f"o.{c}" for c in _cols(OPTIMIZER_TIMERS))}
FROM {_G} g LEFT JOIN {_O} o ON o.run = g.run AND o.step = g.step AND o.rank = g.rank
WHERE g.run = ? AND (g.step, g.rank) > (?, ?) AND g.step < ?
ORDER BY g.step, g.rank LIMIT ?
"""

#: The lowest step of either table that a record after id ``?`` changed (NULL: none).
#: ``step + 0``: SQLite answers a plain ``MIN(step)`` by walking the primary key (run, step,
#: rank) from the run's first step until a row's id is past ``?``, which a live refresh's
#: recent id makes the whole run (0.13 s a table at a million steps); the expression leaves
#: it the (run, id) index, which finds the few rows after ``?`` at once.
CHANGED_FROM = f"""
SELECT MIN(step) FROM (
    SELECT MIN(step + 0) AS step FROM {_G} WHERE run = ? AND id > ?
    UNION ALL SELECT MIN(step + 0) AS step FROM {_O} WHERE run = ? AND id > ?
) changed
"""
#: The newest record id either table took in (NULL: none).
LAST_ID = f"""
SELECT MAX(id) FROM (
    SELECT MAX(id) AS id FROM {_G} WHERE run = ?
    UNION ALL SELECT MAX(id) AS id FROM {_O} WHERE run = ?
) newest
"""
