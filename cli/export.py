"""``dsmon export RUN``: a stored run's records as JSON lines, which ``dsmon import`` reads back.

The lines are the wire form (``dsmon.model.wire``) that ``dsmon parse`` prints and the ingest API
takes, so a run moves between stores (``dsmon export RUN --store a.sqlite -o run.jsonl``, then
``dsmon import run.jsonl --store postgresql://...``) and a script can read it without dsmon.
The run is read one kind at a time, a thousand records per query (``Store.scan``), so a run of
millions of records never sits in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cli.errors import CommandError
from cli.extras import require_full
from cli.parse import STDIN, quiet_stdout, write_records
from dsmon.env import default_store

if TYPE_CHECKING:  # loaded when the command runs: building the command line stays light
    from dsmon.model.records import Record
    from dsmon.store.records.runs import RunInfo
    from dsmon.store.store import Store


def register(subparsers: Any) -> None:
    """Add the ``export`` command."""
    p = subparsers.add_parser(
        "export",
        help="write a stored run's records as JSON lines (dsmon import reads them back)",
        description="Write every record of one run in the store as JSON lines, the form "
        "'dsmon parse' prints and the ingest API accepts: one kind after the other, each in "
        "the order it was stored. 'dsmon import' reads the file back, into any store.",
    )
    p.add_argument("run", metavar="RUN", help="the run to export (dsmon dashboard lists them)")
    p.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    p.add_argument(
        "-o", "--output", default=STDIN, metavar="FILE", help="where to write (default: - = stdout)"
    )
    p.set_defaults(func=run)


def find_run(store: Store, name: str, where: str) -> RunInfo:
    """The run called ``name``, or a CommandError (exit 2) naming the runs there are."""
    runs = store.runs()
    for info in runs:
        if info.name == name:
            return info
    there = f"runs there: {', '.join(r.name for r in runs)}" if runs else "it holds no run"
    raise CommandError(f"export: no run {name!r} in {where}; {there}", code=2)


def run_records(store: Store, info: RunInfo) -> Iterator[Record]:
    """Every record of the run, kind by kind, each kind in stored order, streamed."""
    for kind in info.kinds:
        yield from store.scan(info.name, kind)


@contextlib.contextmanager
def _output(name: str) -> Iterator[TextIO]:
    """stdout, or FILE written under a temporary name and renamed once complete.

    A failed or interrupted export then never leaves a file that looks like a whole run.
    """
    if name == STDIN:
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(name)
    part = path.with_name(f".{path.name}.part")
    try:
        with part.open("w", encoding="utf-8") as out:
            yield out
        os.replace(part, path)
    except OSError as exc:
        raise CommandError(f"cannot write {name}: {exc.strerror or exc}") from None
    finally:
        part.unlink(missing_ok=True)


def _check_exists(url: str) -> None:
    """Exporting from a store file that is not there is a typo, not an empty store to create."""
    from dsmon.store.url import sqlite_file

    path = sqlite_file(url)
    if path is not None and not Path(path).exists():
        raise CommandError(f"export: no store at {path}")


def run(args: argparse.Namespace) -> int:
    """Write the run's records; one line on stderr says how many."""
    require_full("export")
    from dsmon.store.store import open_store
    from dsmon.store.url import redact_url

    url = args.store or default_store()
    _check_exists(url)
    with open_store(url) as store:
        info = find_run(store, args.run, redact_url(url))
        try:
            with _output(args.output) as out:
                n = write_records(run_records(store, info), out)
        except BrokenPipeError:
            quiet_stdout()  # ``dsmon export RUN | head``: the reader went away
            return 0
    print(f"dsmon export: {n} records of run {info.name}", file=sys.stderr)
    return 0
