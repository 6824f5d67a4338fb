"""``dsmon demo``: play the bundled real DeepSpeed run back live into a store, with the dashboard.

The bundled run (``dsmon/data/demo/``) is unmodified output of DeepSpeed 0.19.8: ZeRO-2,
two ranks, 30 steps with wall-clock breakdown and the flops profiler. It ships inside the
package so the README's install is enough to see what dsmon makes of a real run, and it
is played back as if it were training now (``dsmon.load.playback``): a background thread writes one
optimizer step per second (``--speed``) while the dashboard redraws, so the first thing a
user sees is the live view, not only a finished run. The summary is printed when the
playback ends; the dashboard keeps serving until Ctrl-C.

A live playback must not land on an old finished copy: the default demo store is dsmon's own
file and is recreated, while a store the user names gets a new run ``demo-YYYYmmdd-HHMMSS``.
``--instant`` imports at once, and ``--summary-only`` imports and prints the summary only.
:func:`load_demo` is the reusable instant import.
"""

from __future__ import annotations

import argparse
import subprocess
import threading
from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli import supervise, ui_server
from cli.errors import CommandError
from cli.extras import require_full
from cli.import_ import import_and_summarise

if TYPE_CHECKING:  # loaded when the command runs: building the command line stays light
    from dsmon.load.playback import PlaybackResult, PlaybackThread

#: Where ``dsmon demo`` puts its store unless told otherwise.
DEFAULT_DEMO_STORE = "dsmon-demo.sqlite"
#: The run name the demo is stored under (a live playback into a named store adds the time).
DEMO_RUN = "demo"
#: SQLite's companions of a store file, removed with it.
_SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def demo_dir() -> Path:
    """The folder of the bundled run inside the installed package."""
    return Path(str(files("dsmon") / "data" / "demo"))


@dataclass(frozen=True, slots=True)
class DemoResult:
    """Where the demo run was stored, under which name, and its printed report."""

    store_url: str
    run: str
    report: str


def load_demo(store_url: str = DEFAULT_DEMO_STORE) -> DemoResult:
    """Import the bundled run into the store at ``store_url`` (idempotent) and summarise it."""
    from dsmon.store.store import open_store

    with open_store(store_url) as store:
        reports = import_and_summarise(store, [demo_dir()], DEMO_RUN)
    return DemoResult(store_url, DEMO_RUN, reports[0])


def register(subparsers: Any) -> None:
    """Add the ``demo`` command."""
    p = subparsers.add_parser(
        "demo",
        help="play the bundled real DeepSpeed run back live and open the dashboard on it",
        description="Play the bundled DeepSpeed 0.19.8 ZeRO-2 run back into a store as if it "
        "were training now, serve the dashboard on it and print its summary when the playback "
        "ends (--instant: import at once; --summary-only: just the summary).",
    )
    p.add_argument(
        "--store",
        help=f"store path (default: ./{DEFAULT_DEMO_STORE}, recreated for a live playback)",
    )
    p.add_argument(
        "--summary-only", action="store_true", help="import, print the summary, start no dashboard"
    )
    p.add_argument(
        "--instant", action="store_true", help="import at once instead of playing it back live"
    )
    p.add_argument(
        "--speed",
        type=float,
        help="optimizer steps played back per second (default 1)",
    )
    ui_server.add_server_options(p)
    p.set_defaults(func=run)


def remove_store_file(path: str) -> None:
    """Delete a SQLite store and its journal files, so a live playback starts empty."""
    for suffix in _SQLITE_SUFFIXES:
        Path(path + suffix).unlink(missing_ok=True)


def live_target(store: str | None, now: datetime) -> tuple[str, str]:
    """Store and run name of a live playback: the default store afresh, or a new run name.

    The default demo store is dsmon's own, so it is deleted and recreated; a store the user
    named may hold their runs, so it is kept and the playback gets a run of its own.
    """
    if store is None:
        remove_store_file(DEFAULT_DEMO_STORE)
        return DEFAULT_DEMO_STORE, DEMO_RUN
    return store, f"{DEMO_RUN}-{now:%Y%m%d-%H%M%S}"


def playback_report(store_url: str, result: PlaybackResult) -> str:
    """What the playback wrote, then the run summary, as ``dsmon import`` prints them."""
    from dsmon.analysis.summary import summary_text
    from dsmon.health.run_state import stored_state
    from dsmon.store.store import open_store

    head = (
        f"Played back {result.records} records ({result.inserted} new) from "
        f"{result.files} file(s) in {result.elapsed_s:.1f} s"
    )
    with open_store(store_url) as store:
        state = stored_state(store, result.run, datetime.now())
        return f"{head}\n{summary_text(store, result.run, state.line())}"


def _finished(playback: PlaybackThread, store_url: str) -> None:
    """Print the summary of a playback that ended, or raise its failure."""
    if playback.error is not None:
        raise CommandError(f"demo: playback failed: {playback.error}")
    if playback.result is not None and not playback.result.stopped:
        print(playback_report(store_url, playback.result), flush=True)


def run_live(args: argparse.Namespace) -> int:
    """Play back in a thread and serve the dashboard until Ctrl-C; the summary when it ends."""
    from dsmon.load.playback import DEFAULT_SPEED, PlaybackThread
    from dsmon.store.url import redact_url

    speed = DEFAULT_SPEED if args.speed is None else args.speed
    if not speed > 0:
        raise CommandError(f"demo: --speed {args.speed}: must be more than 0 steps per second")
    ui_server.check_port(args.port, "--port", "demo", args.address)
    stop = supervise.stop_on_signals()
    store_url, run_name = live_target(args.store, datetime.now())
    print(f"Store       {redact_url(store_url)}", flush=True)
    print(f"Playing     the bundled run as {run_name!r}, {speed:g} step(s)/s", flush=True)
    playback = PlaybackThread(store_url, [demo_dir()], run_name, speed).start()
    try:
        while not playback.first.wait(0.1):  # open the dashboard on a store that has the run
            if stop.is_set():
                return 0
        ui = ui_server.start_streamlit(
            store_url, args.port, args.address, args.refresh, not args.no_browser, command="demo"
        )
        try:
            signalled = _serve(playback, ui, store_url, stop)
        finally:
            supervise.end_child(ui)
    finally:
        playback.stop()
    if not signalled:
        supervise.child_failed(ui, "demo")
    return 0


def _serve(
    playback: PlaybackThread, ui: subprocess.Popen[bytes], store_url: str, stop: threading.Event
) -> bool:
    """Wait for the playback (then print its summary) and for a signal; True if signalled."""
    signalled = supervise.wait_for_signal(lambda: playback.done or ui.poll() is not None, stop)
    if playback.done:
        _finished(playback, store_url)
    if signalled or ui.poll() is not None:
        return signalled
    return supervise.wait_for_signal(lambda: ui.poll() is not None, stop)


def run(args: argparse.Namespace) -> int:
    """Replay the demo run live with the dashboard, or import it at once (see flags)."""
    require_full("demo")
    from dsmon.store.url import redact_url

    if not (args.summary_only or args.instant):
        return run_live(args)
    result = load_demo(args.store or DEFAULT_DEMO_STORE)
    print(f"Store       {redact_url(result.store_url)}")
    print(result.report)
    if args.summary_only:
        return 0
    return ui_server.start(
        result.store_url, args.port, args.address, args.refresh, not args.no_browser
    )
