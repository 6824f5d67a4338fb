"""``dsmon parse FILE...``: records as JSON lines on stdout, what did not parse on stderr.

The output is the wire form (``dsmon.model.wire``) that the ingest API accepts, so
``dsmon parse train.log`` shows exactly what dsmon understood of a log and can be replayed
into a server. The command streams: a 500 MB log is read one line at a time and records are
written in batches, since one ``write`` per record would dominate the run time.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cli.errors import CommandError, nothing_read

if TYPE_CHECKING:  # loaded when the command runs: building the command line stays light
    from dsmon.load.kinds import Found
    from dsmon.load.rotated import Carries
    from dsmon.model.records import Record
    from dsmon.parse.base import Diagnostics
    from dsmon.store.records.rows import RecordRow

#: Records encoded per ``write`` call.
WRITE_BATCH = 2048
STDIN = "-"


def register(subparsers: Any) -> None:
    """Add the ``parse`` command."""
    p = subparsers.add_parser(
        "parse",
        help="print the records in DeepSpeed output as JSON lines",
        description="Parse DeepSpeed logs (or other saved output) and print one JSON object "
        "per record on stdout; unparsed lines are summarised on stderr. '-' reads stdin.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="a log file, or - for stdin")
    p.add_argument("--run", help="run name in each record (default: the file's folder name)")
    p.set_defaults(func=run)


def check_readable(name: str) -> Path:
    """The path of a FILE argument, or a CommandError saying why it cannot be read."""
    path = Path(name)
    if not path.exists():
        raise CommandError(f"cannot read {name}: No such file or directory")
    if path.is_dir():
        raise CommandError(f"cannot read {name}: Is a directory")
    if not os.access(path, os.R_OK):
        raise CommandError(f"cannot read {name}: Permission denied")
    return path


def _records(
    name: str, found: Found | None, run: str | None, diag: Diagnostics, carries: Carries
) -> Iterator[Record | RecordRow]:
    """Records of one FILE argument (stdin, a log, or another recognised file)."""
    from dsmon.load.files import read_found_rows, read_log
    from dsmon.parse.log import LogParser
    from dsmon.parse.run_files import run_name

    if found is None:
        parser = LogParser(run or "stdin", "<stdin>")
        yield from read_log(sys.stdin.buffer, parser)
        diag.merge(parser.diag)
        return
    yield from read_found_rows(found, run, diag, default_run=run_name(Path(name)), carries=carries)


def _inputs(names: list[str]) -> list[tuple[str, Found | None]]:
    """Each FILE with how to read it (None: stdin), a rotated log's files oldest first.

    ``dsmon parse train.log*`` lists ``train.log`` before ``train.log.1``: read in that
    order, the later file's steps would not be numbered.
    """
    from dsmon.load.kinds import LOG, classify, in_read_order

    found = [classify(Path(n), Path(n).name, explicit=True) for n in names if n != STDIN]
    ordered = iter(in_read_order([f for f in found if f is not None], LOG))  # all explicit
    out: list[tuple[str, Found | None]] = []
    for name in names:
        f = None if name == STDIN else next(ordered)
        out.append((name if f is None else str(f.path), f))
    return out


def write_records(records: Iterable[Record | RecordRow], out: TextIO) -> int:
    """Write records as JSON lines in batches; returns how many.

    The lines are encoded to UTF-8 bytes (``wire.encode_bytes``) and go to the stream's
    binary buffer when it has one (stdout, a file): decoding them to text only for the text
    layer to encode them again cost more than encoding them. A row made for the store (a plain
    timer line, ``dsmon.load.vector``) is written as its JSON body, which is that line.
    """
    from dsmon.model import wire
    from dsmon.store.records.rows import RecordRow

    binary = getattr(out, "buffer", None)
    if binary is not None:
        out.flush()
    write: Callable[[bytes], object] = (
        binary.write if binary is not None else lambda data: out.write(data.decode("utf-8"))
    )
    n = 0
    batch: list[bytes] = []
    for rec in records:
        batch.append(rec.body.encode() if isinstance(rec, RecordRow) else wire.encode_bytes(rec))
        if len(batch) >= WRITE_BATCH:
            write(b"\n".join(batch) + b"\n")
            n += len(batch)
            batch.clear()
    if batch:
        write(b"\n".join(batch) + b"\n")
        n += len(batch)
    return n


def format_diagnostics(diag: Diagnostics, n_files: int, n_records: int) -> str:
    """The stderr report: totals, then unparsed and cut counts per kind with examples."""
    from dsmon.parse.base import OUT_OF_RANGE

    left_out = diag.unparsed[OUT_OF_RANGE]  # a value a record cannot hold, not a line
    head = (
        f"dsmon parse: {n_files} file(s), {diag.lines} lines, {n_records} records, "
        f"{sum(diag.unparsed.values()) - left_out} unparsed lines, "
        f"{sum(diag.cut.values())} cut blocks"
    )
    lines = [head + (f", {left_out} values left out" if left_out else "")]
    for label, bucket in (("unparsed", diag.unparsed), ("cut", diag.cut)):
        for kind, count in sorted(bucket.items()):
            shown = kind if kind == OUT_OF_RANGE else f"{label} {kind}"  # a value, not a line
            lines.append(f"  {shown}: {count}")
            lines.extend(f"    {ex}" for ex in diag.examples.get(kind, []))
    return "\n".join(lines)


def _parse_all(names: list[str], run: str | None, diag: Diagnostics) -> int:
    """Write the records of every FILE to stdout; returns how many."""
    n = 0
    carries: Carries = {}
    for name, found in _inputs(names):
        try:
            n += write_records(_records(name, found, run, diag, carries), sys.stdout)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from None
    sys.stdout.flush()
    return n


def quiet_stdout() -> None:
    """After the reader of stdout went away: not an error of ours, and nothing more to say.

    stdout is pointed at /dev/null, so the flush at exit does not fail a second time.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run(args: argparse.Namespace) -> int:
    """Parse every FILE; exit 0 once all were read, 1 with one line when one cannot be.

    A run that found no record exits 1 too: with the lines that looked like DeepSpeed's but
    did not parse (the report says which), or with one line saying nothing was DeepSpeed's.
    """
    from dsmon.parse.base import Diagnostics

    for name in args.files:
        if name != STDIN:
            check_readable(name)
    diag = Diagnostics()
    try:
        n = _parse_all(args.files, args.run, diag)
    except BrokenPipeError:
        quiet_stdout()  # the reader went away (``dsmon parse big.log | head``)
        return 0
    if n == 0 and not diag.unparsed and not diag.cut:
        raise nothing_read("parse", list(args.files), diag.lines)
    print(format_diagnostics(diag, len(args.files), n), file=sys.stderr)
    return 0 if n else 1
