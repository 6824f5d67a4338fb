"""``dsmon dashboard``: the Streamlit UI and the ingest server, bound to 127.0.0.1 by default.

By default this process runs the ingest server (``dsmon.serve.run``) in a thread, so
collectors on other nodes can report to the machine people look at with nothing else to
start; Streamlit is then a child process (:mod:`cli.ui_server`), and this one supervises
both: SIGINT/SIGTERM stop both, and a UI that dies takes the ingest down with it so nothing
keeps a port open behind a dead dashboard. ``--no-ingest`` keeps the UI alone (the process
becomes Streamlit through ``exec``), for deployments where ``dsmon serve`` runs the ingest
in its own container.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.alerting import add_alert_options, check_alert_options, start_watcher, stop_watcher
from cli.errors import CommandError
from cli.extras import require_full
from cli.supervise import child_failed, end_child, stop_on_signals, wait_for_signal
from cli.ui_server import (
    add_server_options,
    check_ports,
    dashboard_url,
    start,
    start_streamlit,
    supervise_alone,
)
from dsmon.env import default_store
from dsmon.serve import DEFAULT_PORT as DEFAULT_INGEST_PORT
from dsmon.serve.tokens import TokenError, resolve_token, token_banner
from dsmon.watch.alert_defaults import webhook_url


def register(subparsers: Any) -> None:
    """Add the ``dashboard`` command."""
    p = subparsers.add_parser(
        "dashboard",
        help="serve the Streamlit dashboard and the ingest API on a store",
        description="Serve the dsmon dashboard (steps, communication, GPUs, FLOPS) for the runs "
        "in a store, and the ingest API that `dsmon collect` sends to; live runs redraw "
        "every --refresh seconds.",
    )
    add_server_options(p)
    p.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    add_ingest_options(p)
    add_alert_options(p)
    p.set_defaults(func=run)


def add_ingest_options(p: argparse.ArgumentParser) -> None:
    """The ingest server's options: where it listens, its token, or none at all."""
    p.add_argument(
        "--ingest-port",
        type=int,
        default=DEFAULT_INGEST_PORT,
        help=f"TCP port of the ingest API (default {DEFAULT_INGEST_PORT})",
    )
    p.add_argument(
        "--ingest-address",
        help="interface of the ingest API (default: same as --address); 0.0.0.0 for collectors "
        "on other nodes",
    )
    p.add_argument(
        "--token-file",
        help="file holding the ingest token (else $DSMON_TOKEN, $DSMON_TOKEN_FILE, or generated "
        "and printed)",
    )
    p.add_argument(
        "--no-ingest",
        action="store_true",
        help="serve the UI only (the ingest runs elsewhere, e.g. `dsmon serve`)",
    )


def _token(token_file: str | None) -> tuple[str, bool]:
    """The ingest token and whether it was generated (then it must be shown)."""
    try:
        return resolve_token(token_file)
    except TokenError as exc:
        raise CommandError(f"dashboard: {exc}") from None


def serve_with_ingest(args: argparse.Namespace, store: str) -> int:
    """Ingest server in a thread, Streamlit as a child, until a signal or the UI ends."""
    host = args.ingest_address or args.address
    check_alert_options(args, "dashboard")
    check_ports(
        "dashboard", (args.port, "--port", args.address), (args.ingest_port, "--ingest-port", host)
    )
    token, generated = _token(args.token_file)
    stop = stop_on_signals()
    watcher = start_watcher(args, store, "dashboard", dashboard_url(args.port, args.address))
    from dsmon.serve.run import ServeError, start_ingest_server  # the server stack, only here

    try:
        ingest = start_ingest_server(
            store, token, host, args.ingest_port, health=watcher.states if watcher else None
        )
    except (ServeError, TokenError) as exc:
        stop_watcher(watcher)
        raise CommandError(f"dashboard: {exc}") from None
    try:
        print(f"dsmon dashboard: ingest API on {ingest.url} (POST /v1/records)", flush=True)
        if generated:
            print(token_banner(token, ingest.url), flush=True)
        ui = start_streamlit(store, args.port, args.address, args.refresh, not args.no_browser)
        try:
            signalled = wait_for_signal(lambda: ui.poll() is not None, stop)
        finally:
            end_child(ui)
    finally:
        ingest.stop()
        stop_watcher(watcher)
    if not signalled:
        child_failed(ui, "dashboard")
    return 0


def run(args: argparse.Namespace) -> int:
    """Start the dashboard on ``--store``, with the ingest server unless ``--no-ingest``."""
    require_full("dashboard")
    from dsmon.store.url import absolute_url  # the store package: loaded when a command runs

    store = absolute_url(args.store or default_store())
    if args.no_ingest and webhook_url(args.alert_webhook) is not None:
        watcher = start_watcher(args, store, "dashboard", dashboard_url(args.port, args.address))
        try:
            return supervise_alone(store, args.port, args.address, args.refresh)
        finally:
            stop_watcher(watcher)
    if args.no_ingest:
        return start(store, args.port, args.address, args.refresh, not args.no_browser)
    return serve_with_ingest(args, store)
