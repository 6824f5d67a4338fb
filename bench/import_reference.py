"""The vectorised reference of issue 43: a log read as one column of lines, the dominant kinds
(timer, step, throughput, overflow/loss-scale lines) extracted by polars in compiled code with
dsmon's own regular expressions, written as Parquet. ``bench/import_speed.py`` compares
``dsmon import`` with it. Usage: ``python bench/import_reference.py LOG OUTDIR``.
"""

import sys
from pathlib import Path

import polars as pl

from dsmon.parse.families.loss_scale import _OVERFLOW
from dsmon.parse.families.progress import _N, _STEP, _TPUT_NEW
from dsmon.parse.families.timers import _FIELD
from dsmon.parse.lines import DEEPSPEED_HEADER, RANK_TAG

# dsmon's own patterns (each compiles in Python's re and in polars' Rust regex alike).
HEAD = f"^{DEEPSPEED_HEADER}"
TIMER = rf"^(?:{RANK_TAG})?time \(ms\) \|(.*)$"  # timers._HEAD behind print_dist's [Rank N]
FIELD = f"^{_FIELD.pattern}$"
STEP, TPUT, OVERFLOW = _STEP.pattern, _TPUT_NEW.pattern, _OVERFLOW.pattern
RATE = rf"{{}}=({_N})"


def main(log: Path, out: Path) -> None:
    """Read the lines, split off the logger header, write one Parquet file per kind."""
    lines = pl.read_csv(log, has_header=False, separator="\x00", quote_char=None,
                        new_columns=["text"], schema_overrides=[pl.String]).with_row_index("line")  # fmt: skip
    lines = lines.with_columns(
        ts=pl.col("text").str.extract(HEAD, 1) + "T" + pl.col("text").str.extract(HEAD, 2),
        msg=pl.col("text").str.replace(HEAD, ""),
    ).drop("text")
    msg = pl.col("msg")
    timer = lines.filter(msg.str.contains("time (ms) |", literal=True)).with_columns(
        rank=msg.str.extract(TIMER, 1).cast(pl.Int64), body=msg.str.extract(TIMER, 2)
    )
    fields = timer.select("line", "ts", "rank", field=pl.col("body").str.split("|")).explode(
        "field"
    )
    fields.select("line", "ts", "rank",
                  name=pl.col("field").str.extract(FIELD, 1),
                  ms=pl.col("field").str.extract(FIELD, 2).cast(pl.Float64)).write_parquet(out / "timer.parquet")  # fmt: skip
    step = lines.filter(msg.str.contains("step=", literal=True)).select(
        "line", "ts", st=msg.str.extract_groups(STEP)).unnest("st").drop_nulls("1")  # fmt: skip
    step.write_parquet(out / "step.parquet")
    tput = lines.filter(msg.str.contains("epoch=", literal=True)).select(
        "line", "ts", t=msg.str.extract_groups(TPUT)).unnest("t").drop_nulls("1")  # fmt: skip
    rates = {k: pl.col("4").str.extract(RATE.format(k), 1).cast(pl.Float64)
             for k in ("CurrSamplesPerSec", "RunningAvgSamplesPerSec")}  # fmt: skip
    tput.with_columns(**rates).drop("4").write_parquet(out / "throughput.parquet")
    over = lines.filter(msg.str.contains("OVERFLOW!", literal=True)).select(
        "line", "ts", o=msg.str.extract_groups(OVERFLOW)).unnest("o").drop_nulls("1")  # fmt: skip
    over.write_parquet(out / "loss_scale.parquet")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
