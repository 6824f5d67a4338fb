"""The SQL of the GPU tables, written once for SQLite and PostgreSQL.

Both backends keep GPU samples in the same tables (:mod:`dsmon.store.gpu.samples`) and read
them with the same queries (:mod:`dsmon.store.gpu.reads`); where the engines disagree, the
:class:`~dsmon.store.dialect.Dialect` says how each spells it. Statements are written with
``?`` placeholders, as every part's are (``dsmon.store.backend.Db``).
"""

from __future__ import annotations

from dsmon.store.dialect import Dialect
from dsmon.store.gpu.blocks import BATCHES_INDEX_DDL
from dsmon.store.gpu.rows import (
    BUCKET_METRICS,
    BUCKET_STATS,
    SAMPLE_COLUMNS,
    SCALED_FIELDS,
    THROTTLE_BITS,
)

#: Roll-up bucket widths, seconds, finest first. A 10 s level would cost 12 bytes a sample.
LEVELS_S = (60, 600)
_INTEGER = {sc.column for sc in SCALED_FIELDS} | {
    "gpm",
    "throttle_reasons",
    "ecc_corrected",
    "ecc_uncorrected",
}
#: Roll-up statistics that are measurements (the rest are counts, error counters, times).
_MEASURED = {f"{p}_{s}" for p, *_ in BUCKET_METRICS for s in ("sum", "min", "max")}


def _col_type(d: Dialect, col: str) -> str:
    if col == "extra":
        return "TEXT"
    return d.integer if col in _INTEGER else d.real


def _stat_type(d: Dialect, col: str) -> str:
    if d.rollup_stat is not None:
        return d.rollup_stat
    return d.real if col in _MEASURED else d.integer


def _sample_cols(d: Dialect) -> str:
    return ", ".join(f"{c} {_col_type(d, c)}" for c in SAMPLE_COLUMNS)


def ddl(d: Dialect) -> tuple[str, ...]:
    """The GPU tables (see docs/store.md)."""
    i = d.integer
    stats = ", ".join(f"{c} {_stat_type(d, c)}" for c in BUCKET_STATS)
    return (
        f"""CREATE TABLE IF NOT EXISTS gpu_series (
            id {d.series_id},
            run TEXT NOT NULL, node TEXT NOT NULL, file TEXT NOT NULL, sub {i} NOT NULL,
            gpu_index {i} NOT NULL, t0_ms {i} NOT NULL,
            uuid TEXT, name TEXT, mem_total_bytes {i}, power_limit_w {d.real},
            UNIQUE (run, node, file, sub, gpu_index)
        )""",
        samples_ddl(d),
        f"""CREATE TABLE IF NOT EXISTS gpu_batches (
            last_id {i} PRIMARY KEY, first_id {i} NOT NULL, n {i} NOT NULL,
            t_min_ms {i} NOT NULL, t_max_ms {i} NOT NULL
        )""",
        BATCHES_INDEX_DDL,
        f"""CREATE TABLE IF NOT EXISTS gpu_rollup (
            level_s {i} NOT NULL, series {i} NOT NULL, bucket {i} NOT NULL,
            n {i} NOT NULL, {stats},
            PRIMARY KEY (level_s, series, bucket)
        ){d.keyed}""",
    )


def samples_ddl(d: Dialect) -> str:
    """The samples' table, in id order (:mod:`dsmon.store.gpu.blocks` says why)."""
    i = d.integer
    return f"""CREATE TABLE IF NOT EXISTS gpu_samples (
        id {d.sample_id}, series {i} NOT NULL, t_ms {i} NOT NULL, {_sample_cols(d)}
    )"""


def temp_ddl(d: Dialect) -> str:
    """The per-connection table one insert's samples are staged in."""
    i = d.integer
    return f"""CREATE TEMP TABLE IF NOT EXISTS gpu_batch (
        series {i} NOT NULL, t_ms {i} NOT NULL, id {i} NOT NULL,
        {_sample_cols(d)}, abs_ms {i} NOT NULL,
        PRIMARY KEY (series, t_ms)
    ){d.temp_suffix}"""


#: The staged columns, in table order (``abs_ms`` follows).
STAGED = ("series", "t_ms", "id", *SAMPLE_COLUMNS)


def batch_rollup_ddl(d: Dialect) -> str:
    """The per-connection table of a batch's own buckets at the finest level."""
    stats = ", ".join(f"{c} {_stat_type(d, c)}" for c in BUCKET_STATS)
    return f"""CREATE TEMP TABLE IF NOT EXISTS gpu_batch_rollup (
        series {d.integer} NOT NULL, bucket {d.integer} NOT NULL, n {d.integer} NOT NULL,
        {stats}
    ){d.temp_suffix}"""


def _stats(d: Dialect) -> list[tuple[str, str, str]]:
    """Each bucket statistic: its column, its aggregate of samples ``b``, how two merge."""
    out = []
    total = "COALESCE({0}, 0) + COALESCE({1}, 0)"
    for prefix, _, column, _ in BUCKET_METRICS:
        expr = f"b.{column}"
        out.append((f"{prefix}_n", f"COUNT({expr})", "{0} + {1}"))
        out.append((f"{prefix}_sum", f"SUM({expr})", total))
        out.append((f"{prefix}_min", f"MIN({expr})", d.least))
        out.append((f"{prefix}_max", f"MAX({expr})", d.greatest))
    out.append(("thr_n", "COUNT(b.throttle_reasons)", "{0} + {1}"))
    for bit in THROTTLE_BITS:
        out.append((f"thr_{bit}", d.bit_count.format("b.throttle_reasons", bit), total))
    for col, agg, src in (
        ("ecc_c_min", "MIN", "b.ecc_corrected"),
        ("ecc_c_max", "MAX", "b.ecc_corrected"),
        ("ecc_u_max", "MAX", "b.ecc_uncorrected"),
        ("xid_max", "MAX", d.xid.format("b.extra")),
        ("t_min_ms", "MIN", "b.abs_ms"),
        ("t_max_ms", "MAX", "b.abs_ms"),
    ):
        out.append((col, f"{agg}({src})", d.least if agg == "MIN" else d.greatest))
    return out


def batch_rollup(d: Dialect) -> str:
    """INSERT ... SELECT of the staged batch's buckets at the finest level into their table.

    Parameter: the finest level's width (ms). Every level is summed from these few rows
    (:func:`rollup`), not from the batch's samples: some forty statistics aggregated over
    every sample once per level were a twentieth of the ingest server's work a record.
    """
    cols = ", ".join(["series", "bucket", "n", *BUCKET_STATS])
    sel = ", ".join(["COUNT(*)", *(agg for _, agg, _ in _stats(d))])
    return (
        f"INSERT INTO {d.temp}gpu_batch_rollup ({cols}) SELECT b.series, b.abs_ms / ?, {sel} "
        f"FROM {d.temp}gpu_batch b GROUP BY 1, 2"
    )


def rollup(d: Dialect) -> str:
    """INSERT ... SELECT of the batch's buckets at one level, merged into existing ones.

    Parameters: the level (s) and how many of the finest level's buckets make one of its
    own. The batch's buckets are summed from its finest ones (:func:`batch_rollup`): counts
    and sums added, least and greatest kept, as a reader merges roll-up rows.
    """
    merge = ["n = gpu_rollup.n + excluded.n"]
    merge += [
        f"{col} = " + how.format(f"gpu_rollup.{col}", f"excluded.{col}")
        for col, _, how in _stats(d)
    ]
    cols = ", ".join(["level_s", "series", "bucket", "n", *BUCKET_STATS])
    return (
        f"INSERT INTO gpu_rollup ({cols}) SELECT ?, r.series, r.bucket / ?, "
        f"{stats_from_rollups(d)} FROM {d.temp}gpu_batch_rollup r GROUP BY 2, 3 "
        f"ON CONFLICT (level_s, series, bucket) DO UPDATE SET {', '.join(merge)}"
    )


def gpu_kinds(d: Dialect) -> str:
    """GPU samples' share of the per-run bookkeeping: run, kind, n, first, last time, last id."""
    t = "run_kinds"
    return f"""INSERT INTO {t} (run, kind, n, first_ts, last_ts, last_step, last_id)
        VALUES (?, ?, ?, ?, ?, NULL, ?)
        ON CONFLICT (run, kind) DO UPDATE SET
            n = {t}.n + excluded.n,
            first_ts = {d.least.format(f"{t}.first_ts", "excluded.first_ts")},
            last_ts = {d.greatest.format(f"{t}.last_ts", "excluded.last_ts")},
            last_id = {d.greatest.format(f"{t}.last_id", "excluded.last_id")}"""


def stats_from_samples(d: Dialect) -> str:
    """A bucket's columns (after series and b) computed over samples ``s`` of series ``ser``."""
    cols = ["COUNT(*)"]
    for _, _, column, _ in BUCKET_METRICS:
        c = f"s.{column}"
        cols += [f"COUNT({c})", d.sum_value.format(c), f"MIN({c})", f"MAX({c})"]
    cols.append("COUNT(s.throttle_reasons)")
    cols += [d.bit_count.format("s.throttle_reasons", bit) for bit in THROTTLE_BITS]
    cols += ["MIN(s.ecc_corrected)", "MAX(s.ecc_corrected)", "MAX(s.ecc_uncorrected)"]
    cols += [
        f"MAX({d.xid.format('s.extra')})",
        "MIN(s.t_ms + ser.t0_ms)",
        "MAX(s.t_ms + ser.t0_ms)",
    ]
    return ", ".join(cols)


def stats_from_rollups(d: Dialect) -> str:
    """A bucket's columns (after series and b) merged from roll-up rows ``r``."""
    cols = [d.sum_count.format("r.n")]
    for prefix, *_ in BUCKET_METRICS:
        cols += [d.sum_count.format(f"r.{prefix}_n"), d.sum_value.format(f"r.{prefix}_sum")]
        cols += [f"MIN(r.{prefix}_min)", f"MAX(r.{prefix}_max)"]
    cols.append(d.sum_count.format("r.thr_n"))
    cols += [d.sum_count.format(f"r.thr_{bit}") for bit in THROTTLE_BITS]
    cols += ["MIN(r.ecc_c_min)", "MAX(r.ecc_c_max)", "MAX(r.ecc_u_max)", "MAX(r.xid_max)"]
    cols += ["MIN(r.t_min_ms)", "MAX(r.t_max_ms)"]
    return ", ".join(cols)
