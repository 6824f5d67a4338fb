"""``dsmon dashboard``: the Streamlit dashboard on a store, bound to 127.0.0.1 by default.

The dashboard (``app.py`` with ``pages/``) is a Streamlit script, so this command becomes
``python -m streamlit run app.py`` (``exec``) with the store in ``$DSMON_STORE``: the core
package never imports Streamlit, and Ctrl-C or SIGTERM reach the server itself. The server
listens on loopback unless ``--address`` says otherwise, because the dashboard has no login
and shows file paths and config of the run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dsmon.commands import STORE_ENV, CommandError, default_store

DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"
#: Seconds between live redraws, handed to the app as ``$DSMON_REFRESH_S``.
REFRESH_ENV = "DSMON_REFRESH_S"


def app_candidates() -> tuple[Path, ...]:
    """Where ``app.py`` may be: the source checkout, or ``<prefix>/share/dsmon`` of an install."""
    checkout = Path(__file__).resolve().parents[2] / "app.py"
    return checkout, Path(sys.prefix) / "share" / "dsmon" / "app.py"


def app_path() -> Path | None:
    """The dashboard's ``app.py`` (a checkout first, so an editable install runs its own)."""
    return next((p for p in app_candidates() if p.is_file()), None)


def register(subparsers: Any) -> None:
    """Add the ``dashboard`` command."""
    p = subparsers.add_parser(
        "dashboard",
        help="open the Streamlit dashboard on a store",
        description="Serve the dsmon dashboard (steps, communication, GPUs, FLOPS) for the runs "
        "in a store; live runs redraw every --refresh seconds.",
    )
    add_server_options(p)
    p.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    p.set_defaults(func=run)


def add_server_options(p: argparse.ArgumentParser) -> None:
    """The options ``dashboard`` and ``demo`` share: port, address, refresh, browser."""
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})"
    )
    p.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help="interface to bind (default 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--refresh", type=float, default=2.0, help="live redraw period in seconds (default 2)"
    )
    p.add_argument("--no-browser", action="store_true", help="do not open a browser tab")


def streamlit_command(app: Path, port: int, address: str, open_browser: bool) -> list[str]:
    """The ``python -m streamlit run`` command line with the server settings."""
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "false" if open_browser else "true",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def absolute_store(store: str) -> str:
    """A store path made absolute (the child runs in the checkout); URLs are kept as given."""
    return store if "://" in store else str(Path(store).resolve())


def start(store: str, port: int, address: str, refresh_s: float, open_browser: bool) -> int:
    """Replace this process with the dashboard server; returns only by raising.

    Raises:
        CommandError: the port is out of range, ``app.py`` is not where it should be, or
            Python cannot be executed.
    """
    if not 0 < port < 65536:
        raise CommandError(f"dashboard: --port {port}: not a TCP port (1-65535)")
    app = app_path()
    if app is None:
        where = " or ".join(str(p) for p in app_candidates())
        raise CommandError(f"dashboard: cannot find the dashboard script: no {where}")
    store = absolute_store(store)
    env = {**os.environ, STORE_ENV: store, REFRESH_ENV: str(refresh_s)}
    print(
        f"dsmon dashboard on http://{address}:{port} (store {store}); Ctrl-C stops it.", flush=True
    )
    # Become the Streamlit server (exec, not a child): signals and the exit status are its
    # own, and no orphan is left behind. Run from the checkout so Streamlit reads its
    # .streamlit/config.toml (theme, no telemetry).
    os.chdir(app.parent)
    cmd = streamlit_command(app, port, address, open_browser)
    try:
        os.execve(cmd[0], cmd, env)
    except OSError as exc:
        raise CommandError(f"dashboard: cannot start {cmd[0]}: {exc.strerror or exc}") from None
    return 0  # not reached: execve replaced this process


def run(args: argparse.Namespace) -> int:
    """Start the dashboard on ``--store``."""
    return start(
        args.store or default_store(), args.port, args.address, args.refresh, not args.no_browser
    )
