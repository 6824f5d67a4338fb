"""``dsmon import PATH...``: saved DeepSpeed output into the store, then the run summary.

Replay is "ingest once": the same discovery and parsers the live collectors use, run over
files and run folders already on disk. Importing is idempotent, so importing a run again
after it wrote more output adds only what is new. The JSON lines ``dsmon export`` writes are
read back the same way, which moves a run from one store to another.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.errors import CommandError, nothing_read
from cli.extras import require_full
from dsmon.env import default_store

if TYPE_CHECKING:  # loaded when the command runs: building the command line stays light
    from tqdm import tqdm

    from dsmon.load.files import ImportResult, Progress
    from dsmon.store.store import Store


def register(subparsers: Any) -> None:
    """Add the ``import`` command."""
    p = subparsers.add_parser(
        "import",
        help="read saved DeepSpeed output (files or run folders) into the store",
        description="Import logs, flops-profiler files, csv_monitor folders, autotuner "
        "results and ds_config.json from files or run folders, then print a run summary. "
        "Also reads back the JSON lines 'dsmon parse' and 'dsmon export' write (and "
        "GET /v1/records answers), whatever the file is called.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a file or a run folder")
    p.add_argument(
        "--run",
        help="run name for everything imported (default: the folder's name; for JSON-lines "
        "records, the run each record names)",
    )
    p.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    p.set_defaults(func=run)


def progress_bar(bars: list[tqdm[Any]]) -> Callable[[int], Progress]:
    """A progress factory drawing a byte-count bar on stderr, only when stderr is a terminal."""
    from tqdm import tqdm

    def factory(total: int) -> Progress:
        bar: tqdm[Any] = tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            desc="import",
            file=sys.stderr,
            disable=not sys.stderr.isatty(),
        )
        bars.append(bar)
        return bar.update

    return factory


def import_and_summarise(store: Store, paths: list[Path], run: str | None = None) -> list[str]:
    """Import ``paths`` into ``store``; returns one report (counts + summary) per run.

    Raises:
        CommandError: nothing readable was found in the paths.
    """
    from dsmon.load.files import import_paths

    bars: list[tqdm[Any]] = []
    try:
        results = import_paths(store, paths, run, progress_bar(bars))
    finally:
        for bar in bars:
            bar.close()
    if not any(r.files for r in results):
        raise CommandError(f"nothing to import in {', '.join(map(str, paths))}")
    if not any(r.records for r in results):
        lines = sum(r.diag.lines for r in results)
        raise nothing_read("import", [str(p) for p in paths], lines)
    for res in results:
        _warn_bad_records(res)
        for run in res.runs:
            store.frames.keep_sealed(run, tail=True)  # a first look then decodes them, not JSON
    return [_report(store, r) for r in results if r.files]


def _warn_bad_records(res: ImportResult) -> None:
    """One line on stderr per bad JSON-lines record shown: ``FILE:LINE: field 'x': reason``."""
    from dsmon.load.records_file import BAD_RECORD

    for example in res.diag.examples.get(BAD_RECORD, []):
        print(f"dsmon import: skipped {example}", file=sys.stderr)


def _report(store: Store, res: ImportResult) -> str:
    """What one run's import did, then the summary of each run it stored records of."""
    from dsmon.analysis.summary import summary_text
    from dsmon.health.run_state import stored_state
    from dsmon.load.records_file import BAD_RECORD
    from dsmon.parse.base import OUT_OF_RANGE

    head = f"Imported    {res.records} records ({res.inserted} new) from {len(res.files)} file(s)"
    bad = res.diag.unparsed[BAD_RECORD]
    left_out = res.diag.unparsed[OUT_OF_RANGE]  # values a record cannot hold, not lines
    unparsed = sum(res.diag.unparsed.values()) + sum(res.diag.cut.values()) - bad - left_out
    if unparsed:
        head += f"; {unparsed} lines or blocks not understood (dsmon parse shows them)"
    if left_out:
        head += f"; {left_out} values out of range left out"
    if bad:
        head += f"; {bad} bad record lines skipped"
    unread = [
        f"  {kind if kind == OUT_OF_RANGE else f'{label} {kind}'}: {count}, "
        f"the first: {res.diag.examples.get(kind, ['-'])[0]}"
        for label, bucket in (("unparsed", res.diag.unparsed), ("cut", res.diag.cut))
        for kind, count in sorted(bucket.items())
        if kind != BAD_RECORD
    ]  # by kind, so a kind of line dsmon cannot read is seen at once
    now = datetime.now()
    summaries = (summary_text(store, run, stored_state(store, run, now).line()) for run in res.runs)
    return "\n".join([head, *unread, *summaries])


@contextlib.contextmanager
def removed_on_failure(url: str) -> Iterator[None]:
    """A SQLite store file that this command creates is removed again if the command fails.

    ``dsmon import`` of a file that holds no DeepSpeed output, or that cannot be read,
    must not leave an empty ``./dsmon.sqlite`` behind. A store that was there is kept.
    """
    from dsmon.store.url import sqlite_file

    path = sqlite_file(url)
    created = path is not None and not Path(path).exists()
    try:
        yield
    except BaseException:
        if created and path is not None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(path + suffix).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    """Import, then print each run's summary to stdout."""
    require_full("import")
    from dsmon.store.store import open_store
    from dsmon.store.url import redact_url

    url = args.store or default_store()
    paths = [Path(p) for p in args.paths]
    for path in paths:  # before the store is opened: a failed command leaves no file behind
        if not path.exists():
            raise CommandError(f"cannot read {path}: No such file or directory")
    with removed_on_failure(url), open_store(url) as store:
        reports = import_and_summarise(store, paths, args.run)
    print(f"Store       {redact_url(url)}")
    print("\n\n".join(reports))
    return 0
