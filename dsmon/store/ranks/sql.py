"""The SQL of the per-rank tables, written once for SQLite and PostgreSQL.

A 64-rank ``dsmon run`` job of 100k steps stores 6.4 million ``rank_step`` records, and a day
of it about 5.5 million heartbeats. Pages and rules never read them: each write brings its
new records into small tables (:mod:`dsmon.store.ranks.tables`), in the same transaction,
with the statements below. The records stay in ``records`` as the record of truth (export, ``after_id``
readers); these tables can always be rebuilt from them.

- ``rank_steps``: one narrow row per (step, rank), the last record of it: busy time
  (``total_ms - comm_ms``, see :mod:`dsmon.analysis.ranks`), step time, whether the rank was
  seen waiting, the engine's skipped-step count and loss scale, the phases' times, the time
  before its forwards (``input_ms``), its time in timed collectives (``coll_ms``), its loss
  and the gradient norm.
- ``rank_comm``: one row per step, collective op, size bucket and group size: the calls and
  bytes of one rank (every rank makes the same calls), the least time a rank spent in them
  (``wire_ms``: the last rank to arrive waits for no one) and the most (``max_ms``). Kept
  with two-sided MIN/MAX as records arrive, so a record stored twice changes nothing.
- ``rank_step_stats``: one row per step, recomputed from its ``rank_steps`` rows whenever a
  rank's record of it arrives: how many ranks reported, the slowest rank and its busy time,
  the median busy time and step time (window functions: neither engine has a median), the
  fastest rank's busy time, the step's wall time (the slowest rank's), the lowest rank's
  loss, the gradient norm, the step's wire time in collectives (``coll_wire_ms``, the sum of
  its ``rank_comm`` rows' ``wire_ms``) and the most time a rank spent in them
  (``coll_max_ms``). ``id`` is the newest
  record taken into the row, so a live reader asks for the rows changed since the id it last
  saw.
- ``rank_busy``: each rank's busy time per bucket of 8, 64, 512, 4096 and 32768 steps (count,
  sum, min, max) and the sums of its phases (fwd, bwd, step, the time before its forwards,
  its time in collectives, its step time), each level recomputed from the eight buckets of
  the level below it that the
  write touched: exact although a step's record can be replaced, and a page drawing 300
  buckets over a million steps reads a few thousand rows.
- ``rank_beats``: the id of each rank's newest heartbeat (by time, then line), and
  ``rank_beat_steps`` that of each step a rank was in: at a replay position, the newest
  heartbeat of each rank is that of the newest step up to it.
"""

from __future__ import annotations

from dsmon.store.dialect import Dialect

#: Step-bucket widths of ``rank_busy``, finest first: each is eight of the one before.
BUSY_LEVELS = (8, 64, 512, 4096, 32768)
#: Columns of ``rank_step_stats`` as a reader gets them, in this order.
STAT_COLUMNS = (
    "step",
    "id",
    "ts",
    "ranks",
    "slowest_rank",
    "slowest_ms",
    "median_ms",
    "fastest_ms",
    "wall_ms",
    "median_total_ms",
    "waited",
    "skipped_steps",
    "loss_scale",
    "loss",
    "grad_norm",
    "coll_wire_ms",
    "coll_max_ms",
)
#: The per-rank sums ``rank_busy`` keeps besides the busy time: ``rank_steps`` column ->
#: ``rank_busy`` column. A step without a phase's time adds 0.
PHASE_SUMS = {
    "fwd_ms": "fwd_sum",
    "bwd_ms": "bwd_sum",
    "step_ms": "step_sum",
    "input_ms": "input_sum",
    "coll_ms": "coll_sum",
    "total_ms": "total_sum",
}
#: Columns of ``rank_comm`` as a reader gets them.
COMM_COLUMNS = (
    "step",
    "op",
    "bucket_bytes",
    "group_size",
    "calls",
    "msg_bytes",
    "wire_ms",
    "max_ms",
)


def ddl(d: Dialect) -> tuple[str, ...]:
    """The per-rank tables (see docs/store.md)."""
    i, r, t = d.integer, d.real, d.text  # ISO times compare as bytes
    return (
        f"""CREATE TABLE IF NOT EXISTS rank_steps (
            run {t} NOT NULL, step {i} NOT NULL, rank {i} NOT NULL, id {i} NOT NULL,
            ts {t}, busy_ms {r}, total_ms {r}, waited {i} NOT NULL,
            skipped_steps {i}, loss_scale {r}, fwd_ms {r}, bwd_ms {r}, step_ms {r},
            input_ms {r}, coll_ms {r}, loss {r}, grad_norm {r},
            PRIMARY KEY (run, step, rank)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_comm (
            run {t} NOT NULL, step {i} NOT NULL, op {t} NOT NULL, bucket_bytes {i} NOT NULL,
            group_size {i} NOT NULL, id {i} NOT NULL, calls {i}, msg_bytes {i},
            wire_ms {r}, max_ms {r},
            PRIMARY KEY (run, step, op, bucket_bytes, group_size)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_step_stats (
            run {t} NOT NULL, step {i} NOT NULL, id {i} NOT NULL, ts {t},
            ranks {i} NOT NULL, slowest_rank {i}, slowest_ms {r}, median_ms {r},
            fastest_ms {r}, wall_ms {r}, median_total_ms {r}, waited {i} NOT NULL,
            skipped_steps {i}, loss_scale {r}, loss {r}, grad_norm {r},
            coll_wire_ms {r}, coll_max_ms {r},
            PRIMARY KEY (run, step)
        ){d.keyed}""",
        "CREATE INDEX IF NOT EXISTS rank_step_stats_run_id ON rank_step_stats (run, id)",
        f"""CREATE TABLE IF NOT EXISTS rank_busy (
            run {t} NOT NULL, width {i} NOT NULL, bucket {i} NOT NULL, rank {i} NOT NULL,
            n {i} NOT NULL, sum_ms {r}, min_ms {r}, max_ms {r},
            {", ".join(f"{c} {r}" for c in PHASE_SUMS.values())},
            PRIMARY KEY (run, width, bucket, rank)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_beats (
            run {t} NOT NULL, rank {i} NOT NULL, id {i} NOT NULL, ts {t} NOT NULL,
            line {i} NOT NULL,
            PRIMARY KEY (run, rank)
        ){d.keyed}""",
        f"""CREATE TABLE IF NOT EXISTS rank_beat_steps (
            run {t} NOT NULL, rank {i} NOT NULL, step {i} NOT NULL, id {i} NOT NULL,
            ts {t} NOT NULL, line {i} NOT NULL,
            PRIMARY KEY (run, rank, step)
        ){d.keyed}""",
    )


def _new(d: Dialect, kind: str, cols: str) -> str:
    """The records of ``kind`` written after id ``?`` that can be placed (a rank, a step)."""
    placed = "step IS NOT NULL" if kind == "rank_step" else "ts IS NOT NULL"
    return (  # the id range, not a (run, kind) index
        f"SELECT {cols} FROM records{d.not_indexed} WHERE id > ? AND kind = '{kind}' "
        f"AND rank IS NOT NULL AND {placed}"
    )


def _num(d: Dialect, name: str, typ: str) -> str:
    """A number of the record's JSON body (``j``)."""
    return d.json_number.format("j", name, typ)


#: The numbers of a ``rank_step`` body kept in ``rank_steps`` as they are.
_STEP_NUMBERS = ("fwd_ms", "bwd_ms", "step_ms", "input_ms", "loss", "grad_norm")


def _item(d: Dialect, name: str, typ: str) -> str:
    """A field of one element of a JSON array (``value``, see ``Dialect.json_items``)."""
    return d.json_number.format("value", name, typ)


def upsert_steps(d: Dialect) -> str:
    """Upsert the new ``rank_step`` records into ``rank_steps``: the last of each wins.

    ``coll_ms`` sums the ``time_ms`` of the record's ``collectives`` (None without one).
    """
    body = d.json_body
    total, comm = _num(d, "total_ms", d.real), _num(d, "comm_ms", d.real)
    busy = (
        "CASE WHEN t IS NULL THEN NULL WHEN t - COALESCE(c, 0) < 0 THEN 0 "
        "ELSE t - COALESCE(c, 0) END"
    )
    coll = (
        f"(SELECT {d.sum_value.format(_item(d, 'time_ms', d.real))} "
        f"FROM {d.json_items.format('j', 'collectives')})"
    )
    plain = ", ".join(_STEP_NUMBERS)
    picked = ", ".join(f"{_num(d, c, d.real)} AS {c}" for c in _STEP_NUMBERS)
    updated = ", ".join(f"{c} = excluded.{c}" for c in (*_STEP_NUMBERS, "coll_ms"))
    return f"""
INSERT INTO rank_steps (run, step, rank, id, ts, busy_ms, total_ms, waited,
    skipped_steps, loss_scale, {plain}, coll_ms)
SELECT run, step, rank, id, ts, {busy}, t, CASE WHEN c IS NULL THEN 0 ELSE 1 END, sk, ls,
    {plain}, coll_ms
FROM (
    SELECT run, step, rank, id, ts, {total} AS t, {comm} AS c,
        {_num(d, "skipped_steps", d.integer)} AS sk, {_num(d, "loss_scale", d.real)} AS ls,
        {picked}, {coll} AS coll_ms,
        ROW_NUMBER() OVER (PARTITION BY run, step, rank ORDER BY id DESC) AS k
    FROM ({_new(d, "rank_step", f"run, step, rank, id, ts, {body} AS j")}) AS b
) AS n
WHERE k = 1
ON CONFLICT (run, step, rank) DO UPDATE SET
    id = excluded.id, ts = excluded.ts, busy_ms = excluded.busy_ms,
    total_ms = excluded.total_ms, waited = excluded.waited,
    skipped_steps = excluded.skipped_steps, loss_scale = excluded.loss_scale, {updated}
"""


def update_comm(d: Dialect) -> str:
    """Bring the new records' timed collectives into ``rank_comm`` (least and most time).

    Every rank of a data-parallel group makes the same calls, so a step's calls and bytes are
    any one rank's (the most seen is kept); the times are each rank's, waiting included.
    Two-sided MIN and MAX make a record stored twice change nothing. An unknown size bucket
    or group size is kept as -1 (a key column cannot be NULL).
    """
    op = _item(d, "op", "TEXT")
    bucket = f"COALESCE({_item(d, 'bucket_bytes', d.integer)}, -1)"
    group = f"COALESCE({_item(d, 'group_size', d.integer)}, -1)"
    items = d.json_items.format("b.j", "collectives")
    return f"""
INSERT INTO rank_comm (run, step, op, bucket_bytes, group_size, id, calls, msg_bytes,
    wire_ms, max_ms)
SELECT run, step, op, bk, gs, MAX(id), MAX(calls), MAX(mb), MIN(t), MAX(t)
FROM (
    SELECT b.run, b.step, b.id, {op} AS op, {bucket} AS bk, {group} AS gs,
        {_item(d, "calls", d.integer)} AS calls, {_item(d, "msg_bytes", d.integer)} AS mb,
        {_item(d, "time_ms", d.real)} AS t
    FROM ({_new(d, "rank_step", f"run, step, id, {d.json_body} AS j")}) AS b, {items}
) AS c
WHERE t IS NOT NULL GROUP BY run, step, op, bk, gs
ON CONFLICT (run, step, op, bucket_bytes, group_size) DO UPDATE SET
    id = {d.greatest.format("rank_comm.id", "excluded.id")},
    calls = {d.greatest.format("rank_comm.calls", "excluded.calls")},
    msg_bytes = {d.greatest.format("rank_comm.msg_bytes", "excluded.msg_bytes")},
    wire_ms = {d.least.format("rank_comm.wire_ms", "excluded.wire_ms")},
    max_ms = {d.greatest.format("rank_comm.max_ms", "excluded.max_ms")}
"""


def _median(value: str, pos: str, count: str) -> str:
    """The median of ``value`` over a group whose rows are numbered ``pos`` of ``count``."""
    return (
        f"AVG(CASE WHEN {value} IS NOT NULL AND {pos} IN (({count} + 1) / 2, ({count} + 2) / 2) "
        f"THEN {value} END)"
    )


def update_stats(d: Dialect) -> str:
    """Recompute ``rank_step_stats`` of every step the new ``rank_step`` records touched.

    Non-null busy times are numbered in ascending order, ties by descending rank, so the last
    is the slowest rank (the lowest-numbered of equals, as pandas' ``idxmax`` picks). The
    step's loss is its lowest rank's (rank 0's, what DeepSpeed's own monitors write); its
    wire time in collectives sums its ``rank_comm`` rows (:func:`update_comm` runs first).
    """
    over = "PARTITION BY s.run, s.step"
    wire = (
        f"(SELECT {d.sum_value.format('c.wire_ms')} FROM rank_comm c "
        "WHERE c.run = r.run AND c.step = r.step)"
    )
    return f"""
WITH touched AS (SELECT DISTINCT run, step FROM ({_new(d, "rank_step", "run, step")}) AS b),
r AS (
    SELECT s.run, s.step, s.rank, s.id, s.ts, s.busy_ms, s.total_ms, s.waited,
        s.skipped_steps, s.loss_scale, s.loss, s.grad_norm, s.coll_ms,
        ROW_NUMBER() OVER ({over} ORDER BY (s.busy_ms IS NULL), s.busy_ms, s.rank DESC) AS bi,
        COUNT(s.busy_ms) OVER ({over}) AS bn,
        ROW_NUMBER() OVER ({over} ORDER BY (s.total_ms IS NULL), s.total_ms) AS ti,
        COUNT(s.total_ms) OVER ({over}) AS tn,
        ROW_NUMBER() OVER ({over} ORDER BY (s.loss IS NULL), s.rank) AS li
    FROM rank_steps s JOIN touched t ON s.run = t.run AND s.step = t.step
)
INSERT INTO rank_step_stats (run, step, id, ts, ranks, slowest_rank, slowest_ms, median_ms,
    fastest_ms, wall_ms, median_total_ms, waited, skipped_steps, loss_scale, loss, grad_norm,
    coll_wire_ms, coll_max_ms)
SELECT run, step, MAX(id), MAX(ts), MAX(bn), MAX(CASE WHEN bi = bn THEN rank END),
    MAX(busy_ms), {_median("busy_ms", "bi", "bn")}, MIN(busy_ms), MAX(total_ms),
    {_median("total_ms", "ti", "tn")}, {d.sum_count.format("waited")},
    MAX(skipped_steps), MAX(loss_scale), MAX(CASE WHEN li = 1 THEN loss END),
    MAX(grad_norm), {wire}, MAX(coll_ms)
FROM r WHERE true GROUP BY run, step
ON CONFLICT (run, step) DO UPDATE SET
    id = excluded.id, ts = excluded.ts, ranks = excluded.ranks,
    slowest_rank = excluded.slowest_rank, slowest_ms = excluded.slowest_ms,
    median_ms = excluded.median_ms, fastest_ms = excluded.fastest_ms, wall_ms = excluded.wall_ms,
    median_total_ms = excluded.median_total_ms, waited = excluded.waited,
    skipped_steps = excluded.skipped_steps, loss_scale = excluded.loss_scale,
    loss = excluded.loss, grad_norm = excluded.grad_norm,
    coll_wire_ms = excluded.coll_wire_ms, coll_max_ms = excluded.coll_max_ms
"""


def update_busy(d: Dialect, width: int) -> str:
    """Recompute the ``rank_busy`` buckets of ``width`` steps the new records touched.

    The finest level sums ``rank_steps``; each coarser one the eight buckets below it.
    """
    touched = (
        f"SELECT DISTINCT run, step / {width} AS b FROM ({_new(d, 'rank_step', 'run, step')}) AS x"
    )
    if width == BUSY_LEVELS[0]:
        source = f"""rank_steps s ON s.run = t.run
    AND s.step >= t.b * {width} AND s.step < (t.b + 1) * {width}"""
        stats = "COUNT(s.busy_ms), SUM(s.busy_ms), MIN(s.busy_ms), MAX(s.busy_ms)"
        sums = ", ".join(
            d.sum_value.format(f"CASE WHEN s.busy_ms IS NULL THEN 0 ELSE COALESCE(s.{c}, 0) END")
            for c in PHASE_SUMS
        )
    else:
        below = width // 8
        source = f"""rank_busy s ON s.run = t.run AND s.width = {below}
    AND s.bucket >= t.b * 8 AND s.bucket < (t.b + 1) * 8"""
        stats = (
            f"{d.sum_count.format('s.n')}, {d.sum_value.format('s.sum_ms')}, "
            "MIN(s.min_ms), MAX(s.max_ms)"
        )
        sums = ", ".join(d.sum_value.format(f"s.{c}") for c in PHASE_SUMS.values())
    cols = ", ".join(PHASE_SUMS.values())
    updated = ", ".join(f"{c} = excluded.{c}" for c in PHASE_SUMS.values())
    return f"""
WITH touched AS ({touched})
INSERT INTO rank_busy (run, width, bucket, rank, n, sum_ms, min_ms, max_ms, {cols})
SELECT s.run, {width}, t.b, s.rank, {stats}, {sums}
FROM touched t JOIN {source}
WHERE true GROUP BY s.run, t.b, s.rank
ON CONFLICT (run, width, bucket, rank) DO UPDATE SET
    n = excluded.n, sum_ms = excluded.sum_ms, min_ms = excluded.min_ms, max_ms = excluded.max_ms,
    {updated}
"""


def upsert_beats(d: Dialect, table: str = "rank_beats") -> str:
    """Keep each rank's newest heartbeat: by time, then line (as the checklist orders them).

    ``rank_beat_steps``: the newest of each step a rank was in, for a replay position.
    """
    key = "run, rank" if table == "rank_beats" else "run, rank, step"
    cols = "run, rank, step, id, ts, COALESCE(line, 0) AS line"
    stepped = " WHERE step IS NOT NULL" if table != "rank_beats" else ""
    return f"""
INSERT INTO {table} ({key}, id, ts, line)
SELECT {key}, id, ts, line FROM (
    SELECT run, rank, step, id, ts, line,
        ROW_NUMBER() OVER (PARTITION BY {key} ORDER BY ts DESC, line DESC, id DESC) AS k
    FROM ({_new(d, "heartbeat", cols)}) AS b{stepped}
) AS n
WHERE k = 1
ON CONFLICT ({key}) DO UPDATE SET id = excluded.id, ts = excluded.ts, line = excluded.line
WHERE excluded.ts > {table}.ts
    OR (excluded.ts = {table}.ts AND excluded.line >= {table}.line)
"""


# A live reader's rows changed since an id: few, found by the (run, id) index.
STATS_SINCE = f"""
SELECT {", ".join(STAT_COLUMNS)} FROM rank_step_stats
WHERE run = ? AND id > ? ORDER BY id
"""
# A first read, a page of steps at a time in step order (the primary key), up to a step.
STATS_PAGE = f"""
SELECT {", ".join(STAT_COLUMNS)} FROM rank_step_stats
WHERE run = ? AND step > ? AND step <= ? ORDER BY step LIMIT ?
"""
# Each rank's newest heartbeat of the newest step it was in up to a step (a replay position).
BEAT_BODIES_UPTO = """
SELECT r.id, r.body FROM rank_beats b JOIN records r ON r.id = (
    SELECT s.id FROM rank_beat_steps s WHERE s.run = b.run AND s.rank = b.rank AND s.step <= ?
    ORDER BY s.step DESC LIMIT 1
)
WHERE b.run = ? ORDER BY b.rank
"""
BEAT_BODIES = """
SELECT r.id, r.body FROM rank_beats b JOIN records r ON r.id = b.id
WHERE b.run = ? ORDER BY b.rank
"""


def busy_read(
    d: Dialect, level: int | None, width: int, step_max: int | None = None
) -> tuple[str, int]:
    """Each rank's busy time per bucket of ``width`` steps, from the roll-up ``level``.

    ``level`` None: from ``rank_steps`` (a run short enough to draw step by step). Up to
    ``step_max`` (a replay position), the roll-up's buckets before it, then the next finer
    level's up to it, and so on, and the last few steps from ``rank_steps``: each part reads
    fewer than eight buckets a rank. Columns: rank, bucket (of ``width``), count, sum, min,
    max; with how many parameters the SQL takes (each part's one: the run).
    """
    parts = _busy_parts(level, width, step_max, _BUSY_ROLLED, _BUSY_STEPS)
    sql = f"""
SELECT rank, b, {d.sum_count.format("n")}, {d.sum_value.format("s")}, MIN(lo), MAX(hi)
FROM ({" UNION ALL ".join(parts)}) AS u GROUP BY rank, b ORDER BY rank, b
"""
    return sql, len(parts)


def phases_read(
    d: Dialect, level: int | None, width: int, step_max: int | None = None
) -> tuple[str, int]:
    """Each rank's phase sums per bucket of ``width`` steps (:data:`PHASE_SUMS`).

    Read as :func:`busy_read` reads its busy time. Columns: rank, bucket, count, then the
    sums in :data:`PHASE_SUMS` order; with how many parameters the SQL takes.
    """
    rolled = ", ".join(["n", *PHASE_SUMS.values()])
    timed = "CASE WHEN busy_ms IS NULL THEN {} ELSE {} END"
    stepped = ", ".join(
        [timed.format(0, 1) + " AS n"]
        + [f"{timed.format(0, f'COALESCE({c}, 0)')} AS {s}" for c, s in PHASE_SUMS.items()]
    )
    parts = _busy_parts(level, width, step_max, rolled, stepped)
    sums = ", ".join(d.sum_value.format(c) for c in PHASE_SUMS.values())
    sql = f"""
SELECT rank, b, {d.sum_count.format("n")}, {sums}
FROM ({" UNION ALL ".join(parts)}) AS u GROUP BY rank, b ORDER BY rank, b
"""
    return sql, len(parts)


#: What :func:`busy_read` takes from a roll-up row, and from a ``rank_steps`` row.
_BUSY_ROLLED = "n, sum_ms AS s, min_ms AS lo, max_ms AS hi"
_BUSY_STEPS = (
    "CASE WHEN busy_ms IS NULL THEN 0 ELSE 1 END AS n, busy_ms AS s, busy_ms AS lo, busy_ms AS hi"
)


def _busy_parts(
    level: int | None, width: int, step_max: int | None, rolled: str, stepped: str
) -> list[str]:
    """The parts of a roll-up read, each a SELECT of ``rank``, the bucket ``b`` and more.

    ``rolled``: the columns taken from a ``rank_busy`` level, ``stepped``: from ``rank_steps``.
    """
    end = None if step_max is None else int(step_max) + 1  # steps before it
    parts, start = [], 0
    for size in [w for w in BUSY_LEVELS if level is not None and w <= level][::-1]:
        stop = None if end is None else end // size * size
        upper = "" if stop is None else f" AND bucket < {stop // size}"
        parts.append(
            f"SELECT rank, bucket * {size} / {int(width)} AS b, {rolled} "
            f"FROM rank_busy WHERE run = ? AND width = {size} "
            f"AND bucket >= {start // size}{upper}"
        )
        if stop is None:
            return parts
        start = stop
    upper = "" if end is None else f" AND step < {end}"
    parts.append(
        f"SELECT rank, step / {int(width)} AS b, {stepped} FROM rank_steps WHERE run = ? "
        f"AND step >= {start}{upper}"
    )
    return parts


def comm_read(d: Dialect, width: int, step_max: int | None = None) -> str:
    """``rank_comm`` summed per bucket of ``width`` steps, op, size bucket and group size.

    Columns: bucket, op, bucket_bytes, group_size, steps (rows summed), calls, msg_bytes,
    wire_ms, max_ms; one parameter (the run).
    """
    upper = "" if step_max is None else f" AND step <= {int(step_max)}"
    return f"""
SELECT step / {int(width)} AS b, op, bucket_bytes, group_size, COUNT(*),
    {d.sum_count.format("calls")}, {d.sum_count.format("msg_bytes")},
    {d.sum_value.format("wire_ms")}, {d.sum_value.format("max_ms")}
FROM rank_comm WHERE run = ?{upper}
GROUP BY step / {int(width)}, op, bucket_bytes, group_size ORDER BY b, op, bucket_bytes
"""
