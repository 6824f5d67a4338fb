"""``dsmon watch LOG``: the one-machine form, with nothing to configure.

It starts an ingest server (on a free port, with a fresh token it never has to show), a
collector pointed at it (:mod:`cli.collect`), and the Streamlit dashboard, and stops them all
at Ctrl-C.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from cli.alerting import add_alert_options, check_alert_options, start_watcher, stop_watcher
from cli.collect import collector_options, grace_s, log_to_stderr, start_agent
from cli.errors import CommandError
from cli.extras import require_full
from cli.supervise import child_failed, end_child, wait_for_signal
from cli.ui_server import (
    add_server_options,
    check_ports,
    dashboard_url,
    start_streamlit,
)
from dsmon.env import default_store
from dsmon.serve.tokens import TokenError, generate_token, resolve_token, token_banner


def register(subparsers: Any) -> None:
    """Add the ``watch`` command."""
    w = subparsers.add_parser(
        "watch",
        help="collector and dashboard together on this machine, nothing to configure",
        description="Follow a training log live: starts the ingest server, a collector "
        "and the dashboard, all on this machine.",
    )
    collector_options(w, log_flag=False)
    add_server_options(w)
    w.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    w.add_argument(
        "--ingest-port",
        type=int,
        default=0,
        help="TCP port of the ingest API, for collectors on other nodes to send to as well "
        "(default: a free port on 127.0.0.1, used by this command's own collector only)",
    )
    w.add_argument(
        "--ingest-address",
        default="127.0.0.1",
        help="interface of the ingest API (default 127.0.0.1; 0.0.0.0 for other nodes)",
    )
    w.add_argument(
        "--token-file",
        help="file holding the ingest token (else $DSMON_TOKEN; generated and printed when "
        "--ingest-port is given)",
    )
    add_alert_options(w)
    w.set_defaults(func=run, config_beside_log=True)


def run(args: argparse.Namespace) -> int:
    """``dsmon watch LOG``: ingest server, collector and dashboard until Ctrl-C."""
    require_full("watch")
    log_to_stderr()
    from dsmon.store.url import absolute_url  # the store package: loaded when a command runs

    store = absolute_url(args.store or default_store())
    check_alert_options(args, "watch")
    own = [(args.ingest_port, "--ingest-port", args.ingest_address)] if args.ingest_port else []
    check_ports("watch", (args.port, "--port", args.address), *own)
    token, shown = _token(args)
    # Only the commands that serve load the server stack (uvicorn, starlette): a node's
    # ``dsmon collect`` never does.
    from dsmon.serve.run import ServeError, start_ingest_server

    watcher = start_watcher(args, store, "watch", dashboard_url(args.port, args.address))
    try:
        ingest = start_ingest_server(
            store, token, args.ingest_address, args.ingest_port,
            health=watcher.states if watcher else None,
        )  # fmt: skip
    except (ServeError, TokenError) as exc:
        stop_watcher(watcher)
        raise CommandError(f"watch: {exc}") from None
    if args.ingest_port:
        print(f"dsmon watch: ingest API on {ingest.url} (POST /v1/records)", flush=True)
    if shown:
        print(token_banner(token, ingest.url), flush=True)
    try:
        agent = start_agent(args, ingest.url, token, 1 << 30)
        ui = start_streamlit(
            store, args.port, args.address, args.refresh, not args.no_browser, command="watch"
        )
        from dsmon.parse.run_files import run_name

        note = StepOutputNote(store, args.run or run_name(args.log[0]))
        try:
            agent.start()
            signalled = wait_for_signal(
                lambda: note.check() or ui.poll() is not None or not agent.alive
            )
            ui_ended = ui.poll() is not None  # the dashboard ended by itself
            agent.stop(grace_s(args))
        finally:
            end_child(ui)
    finally:
        ingest.stop()
        stop_watcher(watcher)
    if ui_ended and not signalled:
        child_failed(ui, "watch")
    return 0


class StepOutputNote:
    """Says once, on the terminal, that the run's log has nothing per step, and what to do.

    At DeepSpeed's defaults a job prints its start-up lines and then nothing per step, and
    the dashboard stays empty without a word. Once the job's lines have been coming in for
    :data:`GRACE_S` seconds with no step among them, the two ways to get steps are printed
    (``dsmon.analysis.step_output``); a run that later prints steps changes nothing.
    """

    #: Seconds after the run's first record before its lack of steps is said.
    GRACE_S = 60.0
    #: Seconds between looks at the store.
    EVERY_S = 10.0

    def __init__(self, store_url: str, run: str) -> None:
        self._url, self._run = store_url, run
        self._first: float | None = None
        self._next = 0.0
        self.said = False

    def check(self, now: float | None = None) -> bool:
        """Look at the run's record counts when due; never ends the wait (returns False)."""
        now = time.monotonic() if now is None else now
        if self.said or now < self._next:
            return False
        self._next = now + self.EVERY_S
        from dsmon.analysis import step_output
        from dsmon.store.errors import StoreError
        from dsmon.store.store import open_store

        try:
            with open_store(self._url) as store:
                info = next((r for r in store.runs() if r.name == self._run), None)
        except StoreError:
            return False
        if info is None or step_output.has_step_output(info.kinds):
            self._first = None if info is None else self._first
            self.said = info is not None and step_output.has_step_output(info.kinds)
            return False
        if not step_output.lacks_step_output(info.kinds):
            return False
        self._first = now if self._first is None else self._first
        if now - self._first >= self.GRACE_S:
            print(f"dsmon watch: run {self._run!r}: " + "\n  ".join(step_output.NO_STEP_OUTPUT))
            self.said = True
        return False


def _token(args: argparse.Namespace) -> tuple[str, bool]:
    """The ingest token of ``watch`` and whether to print it.

    On a free loopback port only this process's collector sends, so a fresh token is never
    shown. With ``--ingest-port`` other collectors may send too: a given token is used, a
    generated one is printed, as ``dsmon dashboard`` does.
    """
    if not args.ingest_port and not args.token_file:
        return generate_token(), False
    try:
        return resolve_token(args.token_file)
    except TokenError as exc:
        raise CommandError(f"watch: {exc}") from None
