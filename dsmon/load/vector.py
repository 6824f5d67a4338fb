"""The vector path of a saved log: lines read in chunks, plain timer and progress lines found in compiled code.

A long run's log is mostly engine timer lines (``[Rank 0] time (ms) | fwd: 12.27 | ...``), one
to three per step, and DeepSpeed's progress lines every ``steps_per_print`` steps: the step
line (``step=N, skipped=S, lr=[...], mom=[...]``) and the ThroughputTimer's
(``epoch=E/micro_step=M/global_step=G, RunningAvgSamplesPerSec=...``). Offered one by one to
the Python parsers, each costs a line cleaning, a dispatch through the sub-parsers, and a
record built, checked and encoded. Here a chunk of lines becomes one polars column, and two
regexes composed of the patterns the per-line path owns (the logger header and ``[Rank N]``
of :mod:`dsmon.parse.lines`; the timer fields of :mod:`dsmon.parse.families.timers`; the step
message and the plain throughput line of :mod:`dsmon.parse.families.progress`) pick out, in
compiled code, the timer lines whose every field is a plain value and the progress lines of
those forms; polars extracts their time and rank, a timer line's field names and values, a
progress line's message.

The log parser is then given every line in file order: each other line goes through
:meth:`LogParser.feed <dsmon.parse.log.LogParser.feed>` as before; whenever the parser is
quiet (:meth:`LogParser.quiet <dsmon.parse.log.LogParser.quiet>`: no block open, no line
joined on trial, steps known), each plain timer line goes through
:meth:`LogParser.take_timer <dsmon.parse.log.LogParser.take_timer>` and each plain progress
line through :meth:`LogParser.take_progress_row <dsmon.parse.log.LogParser.take_progress_row>`,
which move the parser's state (step clock, last time, counts, the progress parser's last
``step=``) as ``feed`` would. Such a line's record is made straight into the row the store
keeps (:mod:`dsmon.load.plain_rows`), with the JSON body and the key the record would have,
written from a template the record codec itself made: no record object, no check, no
encoder call per line. A progress line with a figure its record would not hold as printed
(a learning rate that is not finite, a step past the largest a record names) goes to
``feed`` instead, before anything moved.

Every other line still costs ``feed``: the training script's own prints, the flops
profiler's blocks, loss-scale messages (rare, and a skipped step's lines are read with the
step they belong to), a line the parser reads while it is not quiet. Only for files
(``dsmon import``, ``dsmon parse``); the live tail parses line by line. polars comes with the
full install: without it :func:`available` is False and callers read line by line. Both ways
give the same rows (tests/unit/load/test_vector.py parses every corpus log both ways).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, BinaryIO

from dsmon.load.plain_rows import ProgressRows, TimerRows
from dsmon.model.records import Record
from dsmon.parse.base import LineParser
from dsmon.parse.families import timers
from dsmon.parse.families.progress import PLAIN_THROUGHPUT, STEP_MESSAGE
from dsmon.parse.launches import START_LOGGERS
from dsmon.parse.linereader import capped_chunks, note_cut
from dsmon.parse.lines import DEEPSPEED_HEADER, RANK_TAG, valid_date
from dsmon.parse.log import LogParser
from dsmon.parse.run_files import with_rank
from dsmon.store.records.rows import RecordRow

if TYPE_CHECKING:
    import polars as pl

#: Lines given to polars at a time (about a MB of a log): its per-call cost vanishes, the
#: progress bar moves about every MB as the per-line path moves it, memory stays flat.
CHUNK_LINES = 1 << 13
#: Progress is reported every this many bytes, not every line (the hot loop stays cheap); both
#: readers (this and ``dsmon.load.files.read_log``) use it.
PROGRESS_EVERY = 1 << 20
#: A plain timer line whole: optional logger header, optional ``[Rank N]``, the message.
PLAIN_TIMER_LINE = f"^(?:{DEEPSPEED_HEADER})?(?:{RANK_TAG})?{timers.PLAIN_MESSAGE}$"
_FIELD_VALUE = f": {timers.PLAIN_VALUE}"
#: What the line cleaner takes off a line before its message: logger header, ``[Rank N]``.
_HEADS = f"^(?:{DEEPSPEED_HEADER})?(?:{RANK_TAG})?"
#: A plain progress line whole: the step line, or the v0.8+ ThroughputTimer line of plain
#: figures (digits and spaces in ASCII only, as ``(?-u)`` reads ``\\d`` and ``\\s``: a subset
#: of what the progress parser's own regexes read).
PLAIN_PROGRESS_LINE = f"{_HEADS}(?-u:{STEP_MESSAGE}|{PLAIN_THROUGHPUT})$"
#: What the line cleaner would act on (a ``\r`` that splits tqdm redraws, ANSI colours, a
#: second ``[`` inside the logger header, where a glued line could start): such a line is
#: left to the per-line path.
_CLEANED = r"[\r\x1b]|^\[[^\]]*\] \[[A-Z]+\] \[[^\]]*\["
#: ``12.30`` is the float 12.3, which the record's JSON writes ``12.3`` (``0.00``: ``0.0``):
#: each value of a line's comma-joined values, whose every value has two decimals.
_TRAILING_ZERO = r"(\d\.\d)0(,|$)"


def available() -> bool:
    """Whether polars is installed (the full install's), so that the vector path can run."""
    try:
        return importlib.util.find_spec("polars") is not None
    except (ImportError, ValueError):
        return False


class PlainLines:
    """The plain timer and progress lines of one chunk, in file order (parallel lists).

    ``index`` is the line's place in the chunk, ``timer`` whether it is a timer line (else a
    progress line); ``shape`` and ``values`` are a timer line's, ``message`` a progress
    line's (what the line cleaner would leave of it).
    """

    __slots__ = ("index", "timer", "ts", "rank", "shape", "values", "message")

    def __init__(self, frame: pl.DataFrame) -> None:
        self.index: list[int] = frame["i"].to_list()
        self.timer: list[bool] = frame["timer"].to_list()
        self.ts: list[str | None] = frame["ts"].to_list()
        self.rank: list[int | None] = frame["rank"].to_list()
        self.shape: list[str | None] = frame["shape"].to_list()
        self.values: list[str | None] = frame["values"].to_list()
        self.message: list[str | None] = frame["message"].to_list()


def find_plain_lines(texts: Sequence[str]) -> PlainLines:
    """The lines of ``texts`` (decoded, newline kept or not) that are plain timer or progress lines."""
    import polars as pl

    t = pl.col("t")
    frame = (
        pl.DataFrame({"t": pl.Series(texts, dtype=pl.String)})
        .with_row_index("i")
        .filter(t.str.contains_any(["time (ms) |", "step="]))  # the cheap test first
        .with_columns(t.str.strip_chars_end("\r\n"))
        .with_columns(timer=t.str.contains(PLAIN_TIMER_LINE))
        .filter(
            pl.col("timer") | t.str.contains(PLAIN_PROGRESS_LINE),
            ~t.str.contains(_CLEANED, literal=False),
        )
    )
    head = t.str.starts_with("[") & ~t.str.starts_with("[Rank ")
    frame = frame.with_columns(
        date=pl.when(head).then(t.str.slice(1, 10)),
        time=pl.when(head).then(t.str.slice(12, 8)),
        logger=t.str.extract(r"^\[[^\]]+\] \[[A-Z]+\] \[([^\]:]+):", 1),
        rank=t.str.extract(r"\[Rank (-?\d+)\] (?:time \(ms\)|step=|epoch=)", 1),
        # what follows the first ``time (ms) |`` (a literal split: a regex search cost 3x)
        body=pl.when("timer").then(t.str.splitn("time (ms) |", 2).struct.field("field_1")),
    )
    bad_dates = [d for d in frame["date"].drop_nulls().unique().to_list() if not valid_date(d)]
    time = pl.col("time")
    good_time = (
        (time.str.slice(0, 2) < "24") & (time.str.slice(3, 1) < "6") & (time.str.slice(6, 1) < "6")
    )
    body = pl.col("body")
    frame = frame.filter(
        pl.col("date").is_null() | (~pl.col("date").is_in(bad_dates) & good_time),
        pl.col("logger").is_null() | ~pl.col("logger").is_in(list(START_LOGGERS)),
        pl.col("rank").is_null() | pl.col("rank").str.contains(r"^[0-9]{1,9}$"),  # a plain rank
    ).select(
        "i",
        "timer",
        pl.col("rank").cast(pl.Int64),
        ts=pl.concat_str(pl.col("date"), pl.lit("T"), time, pl.lit("."), t.str.slice(21, 3)),
        shape=body.str.replace_all(_FIELD_VALUE, ": #"),
        values=body.str.extract_all(_FIELD_VALUE)
        .list.join(",")
        .str.replace_all(": ", "", literal=True)  # (no value holds one)
        .str.replace_all(_TRAILING_ZERO, "${1}${2}"),
        message=pl.when(~pl.col("timer")).then(t.str.replace(_HEADS, "")),
    )
    return PlainLines(frame)


def log_rows(
    stream: BinaryIO,
    parser: LogParser,
    rank: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> Iterator[Record | RecordRow]:
    """Records of a binary log stream as ``dsmon.load.files.read_log`` yields them, in order.

    Plain timer lines come as rows (:class:`TimerRows`), every other line's records as
    records; ``rank`` is the file's rank, given to records whose line names none.
    """
    rows = TimerRows(parser, rank)
    progress_rows = ProgressRows(parser)
    takes_progress = parser.takes_progress()
    offset = reported = lineno = 0
    for chunk in capped_chunks(stream, CHUNK_LINES):
        texts = [data.decode("utf-8", "replace") for data in chunk.data]
        starts = list(accumulate(chunk.size[:-1], initial=offset))
        cut = chunk.cut
        plain = find_plain_lines(texts)
        out: list[Record | RecordRow] = []
        pos = 0
        quiet = False
        for j, timer, ts, line_rank, printed, values, message in zip(
            plain.index,
            plain.timer,
            plain.ts,
            plain.rank,
            plain.shape,
            plain.values,
            plain.message,
            strict=True,
        ):
            if pos < j:
                _feed(parser, cut, texts, starts, lineno, pos, j, rank, out)
                quiet = parser.quiet()
            elif pos == 0:
                quiet = parser.quiet()
            pos = j + 1
            at = lineno + pos
            made: RecordRow | None = None
            if quiet and not cut[j]:
                if timer:
                    assert printed is not None and values is not None
                    known = rows.shape(printed)
                    if known is not None:
                        facts = parser.take_timer(at, starts[j], ts, line_rank, known[0])
                        made = rows.row(at, starts[j], facts, line_rank, values, known)
                elif takes_progress and message is not None:
                    made = progress_rows.row(at, starts[j], ts, line_rank, message)
            if made is None:  # the line as the per-line path reads it
                _feed(parser, cut, texts, starts, lineno, j, pos, rank, out)
                quiet = parser.quiet()
            else:  # the parser moved as feed moves it, and stays quiet
                out.append(made)
        _feed(parser, cut, texts, starts, lineno, pos, len(texts), rank, out)
        yield from out
        lineno += len(texts)
        offset = starts[-1] + chunk.size[-1]
        if progress is not None and offset - reported >= PROGRESS_EVERY:
            progress(offset - reported)
            reported = offset
    yield from finish_log(parser, rank, progress, offset - reported)


def finish_log(
    parser: LineParser,
    rank: int | None,
    progress: Callable[[int], object] | None,
    unreported: int,
) -> Iterator[Record]:
    """A log's end for both readers: the parser's last records, then the bytes not yet told."""
    tail = parser.finish()
    yield from (tail if rank is None else with_rank(tail, rank))
    if progress is not None and unreported > 0:
        progress(unreported)


def _feed(
    parser: LogParser,
    cut: list[bool],
    texts: list[str],
    starts: list[int],
    lineno: int,
    first: int,
    end: int,
    rank: int | None,
    out: list[Record | RecordRow],
) -> None:
    """Lines ``first`` to ``end`` of the chunk through the per-line parser, as read_log does."""
    for k in range(first, end):
        at = lineno + k + 1
        recs = parser.feed(texts[k], starts[k], at)
        if cut[k]:
            note_cut(parser.diag, parser.file, at)
        if recs:
            out.extend(recs if rank is None else with_rank(recs, rank))
