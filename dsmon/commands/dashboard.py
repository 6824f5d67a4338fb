"""``dsmon dashboard``: the Streamlit UI and the ingest server, bound to 127.0.0.1 by default.

The dashboard (``app.py`` with ``pages/``) is a Streamlit script, so the UI always runs as
``python -m streamlit run app.py`` with the store in ``$DSMON_STORE``: the core package never
imports Streamlit. By default this process also runs the ingest server (``dsmon.serve.run``)
in a thread, so collectors on other nodes can report to the machine people look at with
nothing else to start; Streamlit is then a child process, and this one supervises both:
SIGINT/SIGTERM stop both, and a UI that dies takes the ingest down with it so nothing keeps
a port open behind a dead dashboard. ``--no-ingest`` keeps the UI alone (the process
becomes Streamlit through ``exec``), for deployments where ``dsmon serve`` runs the ingest
in its own container. Both listen on loopback unless told otherwise, because the dashboard
has no login and shows file paths and config of the run.

:func:`start_streamlit` is public because ``dsmon demo`` and ``dsmon watch`` run the UI the
same way, supervised with the helpers of :mod:`dsmon.commands._supervise`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import urllib.request
import webbrowser
from pathlib import Path
from typing import Any

from dsmon.commands import STORE_ENV, CommandError, default_store
from dsmon.commands._alerting import add_alert_options, start_watcher, stop_watcher
from dsmon.commands._supervise import child_failed, end_child, stop_on_signals, wait_for_signal
from dsmon.serve import DEFAULT_PORT as DEFAULT_INGEST_PORT
from dsmon.serve.tokens import TokenError, resolve_token, token_banner
from dsmon.store.url import absolute_url, redact_url
from dsmon.watch.alert_defaults import webhook_url

DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"
#: Seconds between live redraws, handed to the app as ``$DSMON_REFRESH_S``.
REFRESH_ENV = "DSMON_REFRESH_S"
#: How long the browser tab waits for the dashboard to answer before giving up.
BROWSER_WAIT_S = 120.0


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


def add_server_options(p: argparse.ArgumentParser) -> None:
    """The options ``dashboard``, ``demo`` and ``watch`` share: port, address, refresh, browser."""
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


def streamlit_command(app: Path, port: int, address: str) -> list[str]:
    """The ``python -m streamlit run`` command line with the server settings.

    Always headless: a non-headless Streamlit asks for an e-mail address on its first start
    on a machine (no ``~/.streamlit/credentials.toml``), which waits forever in a terminal
    and exits 255 without one (nohup, systemd, CI, a container). dsmon opens the browser
    itself (:func:`open_browser_when_ready`).
    """
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def browser_available() -> bool:
    """Whether a browser can be shown here: a desktop session, macOS/Windows, or ``$BROWSER``.

    Without one (SSH, a container, a CI job) Python's ``webbrowser`` could start a text-mode
    browser on the terminal, which is worse than not opening any: the URL is printed anyway.
    """
    if os.environ.get("BROWSER"):
        return True
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def dashboard_url(port: int, address: str) -> str:
    """The URL a browser on this machine opens (a wildcard address is reached on loopback)."""
    host = "127.0.0.1" if address in ("0.0.0.0", "::", "") else address
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def open_browser_when_ready(
    url: str, child: subprocess.Popen[bytes], wait_s: float = BROWSER_WAIT_S
) -> threading.Thread | None:
    """Open ``url`` in the user's browser once Streamlit answers its health check.

    In a daemon thread, so a browser that never returns cannot hold dsmon up; nothing is
    opened when no browser can be shown here, or when the server died first.
    """
    if not browser_available():
        return None

    def wait_and_open() -> None:
        if wait_until_ready(url, child, wait_s):
            webbrowser.open(url, new=2)

    thread = threading.Thread(target=wait_and_open, name="dsmon-browser", daemon=True)
    thread.start()
    return thread


def wait_until_ready(
    url: str,
    child: subprocess.Popen[bytes],
    wait_s: float = BROWSER_WAIT_S,
    stop: threading.Event | None = None,
) -> bool:
    """Whether the dashboard at ``url`` answers Streamlit's health check within ``wait_s``.

    False when ``child`` (its server) died first, or ``stop`` was set (Ctrl-C): a caller that
    tells the user the dashboard is up must not say so before it is.
    """
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and child.poll() is None:
        if stop is not None and stop.is_set():
            return False
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.25)
    return False


def check_port(port: int, flag: str, command: str = "dashboard") -> None:
    """Refuse a port number TCP cannot have, naming the flag, before anything starts."""
    if not 0 < port < 65536:
        raise CommandError(f"{command}: {flag} {port}: not a TCP port (1-65535)")


def _launch(
    store: str, port: int, address: str, refresh_s: float, command: str
) -> tuple[list[str], dict[str, str], Path]:
    """Command line, environment and folder of the Streamlit server, after checking them.

    It runs from the checkout (or share folder) so Streamlit reads the
    ``.streamlit/config.toml`` next to ``app.py`` (theme, no telemetry).
    """
    check_port(port, "--port", command)
    app = app_path()
    if app is None:
        where = " or ".join(str(p) for p in app_candidates())
        raise CommandError(f"{command}: cannot find the dashboard script: no {where}")
    store = absolute_url(store)
    env = {**os.environ, STORE_ENV: store, REFRESH_ENV: str(refresh_s)}
    print(
        f"dsmon {command}: dashboard on http://{address}:{port} (store {redact_url(store)}); "
        "Ctrl-C stops it.",
        flush=True,
    )
    return streamlit_command(app, port, address), env, app.parent


def start(store: str, port: int, address: str, refresh_s: float, open_browser: bool) -> int:
    """Run the dashboard server alone until it ends or a signal comes.

    With no browser to open, this process becomes the server (``exec``): signals and the
    exit status are then Streamlit's own, and no orphan is left behind. Otherwise it stays
    to open the browser once the server answers, and supervises it.

    Raises:
        CommandError: the port is out of range, ``app.py`` is not where it should be, or
            Python cannot be executed.
    """
    if open_browser and browser_available():
        return supervise_alone(store, port, address, refresh_s)
    cmd, env, cwd = _launch(store, port, address, refresh_s, "dashboard")
    os.chdir(cwd)
    try:
        os.execve(cmd[0], cmd, env)
    except OSError as exc:
        raise CommandError(f"dashboard: cannot start {cmd[0]}: {exc.strerror or exc}") from None
    return 0  # not reached: execve replaced this process


def supervise_alone(store: str, port: int, address: str, refresh_s: float) -> int:
    """The dashboard as a child, with the browser opened on it, until a signal or its end."""
    stop = stop_on_signals()
    ui = start_streamlit(store, port, address, refresh_s, True)
    try:
        signalled = wait_for_signal(lambda: ui.poll() is not None, stop)
    finally:
        end_child(ui)
    if not signalled:
        child_failed(ui, "dashboard")
    return 0


def start_streamlit(
    store: str,
    port: int,
    address: str,
    refresh_s: float,
    open_browser: bool,
    *,
    command: str = "dashboard",
) -> subprocess.Popen[bytes]:
    """The dashboard as a child process, for a caller that has other work (ingest, replay).

    Raises:
        CommandError: the port is out of range, ``app.py`` is missing, or Python cannot run;
            the message starts with ``command``.
    """
    cmd, env, cwd = _launch(store, port, address, refresh_s, command)
    try:
        child = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise CommandError(f"{command}: cannot start {cmd[0]}: {exc.strerror or exc}") from None
    if open_browser:
        open_browser_when_ready(dashboard_url(port, address), child)
    return child


def _token(token_file: str | None) -> tuple[str, bool]:
    """The ingest token and whether it was generated (then it must be shown)."""
    try:
        return resolve_token(token_file)
    except TokenError as exc:
        raise CommandError(f"dashboard: {exc}") from None


def serve_with_ingest(args: argparse.Namespace, store: str) -> int:
    """Ingest server in a thread, Streamlit as a child, until a signal or the UI ends."""
    check_port(args.port, "--port")
    check_port(args.ingest_port, "--ingest-port")
    token, generated = _token(args.token_file)
    host = args.ingest_address or args.address
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
