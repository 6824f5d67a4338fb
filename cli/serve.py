"""``dsmon serve``: the ingest API and ``/metrics`` on their own, without the dashboard UI.

For deployments where collectors on many nodes report into PostgreSQL through one or more
ingest servers while the dashboard runs elsewhere (or not at all, with Prometheus and
Grafana reading ``/metrics``). A headless server never invents a token: with no
``--token-file`` and no ``$DSMON_TOKEN`` it refuses to start, since nobody would see a
generated one; ``--new-token-file F`` uses the token in F, writing a fresh one there (mode
0600) when F is missing or empty, so a restart keeps the token running collectors hold.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType
from typing import Any

from cli.alerting import add_alert_options, start_watcher, stop_watcher
from cli.errors import CommandError
from cli.extras import require_full
from dsmon.env import default_store
from dsmon.serve import DEFAULT_PORT
from dsmon.serve.tokens import TokenError, keep_or_create_token_file, load_token


def register(subparsers: Any) -> None:
    """Add the ``serve`` command."""
    p = subparsers.add_parser(
        "serve",
        help="run the ingest API (POST /v1/records) and /metrics without the UI",
        description="Receive records from `dsmon collect` on every node and store them; "
        "serve /v1/runs, /v1/records, /healthz and Prometheus /metrics.",
    )
    p.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    p.add_argument("--host", default="127.0.0.1", help="interface (0.0.0.0: every interface)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})"
    )
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token-file", help="file holding the bearer token (else $DSMON_TOKEN)")
    tok.add_argument(
        "--new-token-file",
        help="use the token in this file; create it with a new token if missing or empty",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=16.0, help="largest request body in MiB (default 16)"
    )
    add_alert_options(p)
    p.set_defaults(func=run)


def _token(args: argparse.Namespace) -> str:
    """The token to serve with; raises CommandError when none is configured."""
    try:
        if args.new_token_file:
            token, new = keep_or_create_token_file(args.new_token_file)
            said = "new token written to" if new else "token kept from"
            print(f"dsmon: {said} {args.new_token_file}", file=sys.stderr)
            return token
        found = load_token(args.token_file)
    except TokenError as exc:
        raise CommandError(f"serve: {exc}") from None
    if found is None:
        raise CommandError(
            "serve: no token: pass --token-file F, --new-token-file F or set $DSMON_TOKEN"
        )
    return found


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    require_full("serve")
    from dsmon.store.url import redact_url

    # SIGTERM (docker stop, the end of a pod) ends the server as Ctrl-C does. uvicorn shuts
    # down gracefully on either, then raises the signal again under the handler it found: at
    # the default one SIGTERM killed the process there (status 143), before the store was
    # closed and the alert watcher stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    store_url = args.store or default_store()
    token = _token(args)

    def ready(url: str) -> None:
        print(f"dsmon: ingest server on {url}, store {redact_url(store_url)}", file=sys.stderr)

    watcher = start_watcher(args, store_url, "serve")
    from dsmon.serve.run import ServeError, serve_forever  # the server stack, only here

    try:
        serve_forever(
            store_url,
            token,
            args.host,
            args.port,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            on_ready=ready,
            health=watcher.states if watcher else None,
        )
    except (ServeError, TokenError) as exc:
        raise CommandError(str(exc)) from None
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C it shut down on: stopping is the normal end
    finally:
        stop_watcher(watcher)
    return 0
