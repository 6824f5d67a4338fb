"""The dashboard UI as a Streamlit child process: its options, its start, its readiness.

The dashboard (``app.py`` with ``pages/``) is a Streamlit script, so the UI always runs as
``python -m streamlit run app.py`` with the store in ``$DSMON_STORE`` and the redraw period in
``$DSMON_REFRESH_S`` (:mod:`dsmon.env`): nothing below the command line imports Streamlit.
``dsmon dashboard``, ``demo``, ``watch`` and ``run`` start it this way
(:func:`start_streamlit`), supervised with :mod:`cli.supervise`; ``dsmon dashboard`` alone
may also become the server (:func:`start`). It runs from a private copy of its scripts and
packages (:func:`private_copy`), so reinstalling dsmon under a running dashboard breaks
nothing. It listens on loopback unless told otherwise,
because the dashboard has no login and shows file paths and config of the run.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import webbrowser
from pathlib import Path

from cli.errors import CommandError
from cli.supervise import child_failed, end_child, stop_on_signals, wait_for_signal
from cli.ui_child import PARENT_ENV
from dsmon.env import REFRESH_ENV, STORE_ENV

DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"
#: How long the browser tab waits for the dashboard to answer before giving up.
BROWSER_WAIT_S = 120.0


def app_candidates() -> tuple[Path, ...]:
    """Where ``app.py`` may be: the source checkout, or ``<prefix>/share/dsmon`` of an install."""
    checkout = Path(__file__).resolve().parents[1] / "app.py"
    return checkout, Path(sys.prefix) / "share" / "dsmon" / "app.py"


def app_path() -> Path | None:
    """The dashboard's ``app.py`` (a checkout first, so an editable install runs its own)."""
    return next((p for p in app_candidates() if p.is_file()), None)


#: The packages the dashboard's scripts import (``app.py``, ``pages/``): copied with them.
DASHBOARD_PACKAGES = ("dsmon", "ui")
#: What the copy leaves out: compiled files (the package's data, such as what each DeepSpeed
#: release reads, is read by the health rules: it is copied).
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc")


def private_copy(app: Path) -> Path:
    """A copy of the dashboard, for this process alone: its ``app.py`` in the copy.

    Streamlit reads ``app.py`` and ``pages/`` again for every browser session, and imports
    modules of ``dsmon`` and ``ui`` only when a page first needs them. Run from where pip
    put them, a dashboard broke as soon as they moved: ``pip install -e .`` in the same
    virtualenv (the README's second line, tried while the demo of its first still ran)
    deleted ``share/dsmon`` and the installed packages, and every new session was a grey
    page and a traceback. So the dashboard runs from a copy of its scripts and of the two
    packages (Streamlit puts the script's folder first on ``sys.path``), made at each start
    in the user's cache folder, named after this process: copies whose process is gone are
    removed at the next start (the process that ``exec``s Streamlit keeps its number).
    """
    root = _copies_root()
    for old in root.iterdir():
        pid = old.name.partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    dest = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
    shutil.copy2(app, dest / "app.py")
    for folder in ("pages", ".streamlit"):
        if (app.parent / folder).is_dir():
            shutil.copytree(app.parent / folder, dest / folder, ignore=_NOT_COPIED)
    for name in DASHBOARD_PACKAGES:
        spec = importlib.util.find_spec(name)  # found, not imported: cli never imports ui
        if spec is None or not spec.submodule_search_locations:
            raise OSError(f"package {name} not found")
        source = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(source, dest / name, ignore=_NOT_COPIED)
    return dest / "app.py"


def _copies_root() -> Path:
    """Where the dashboard copies live: ``$XDG_CACHE_HOME/dsmon/dashboard``, or the temp dir."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for root in (
        Path(base) / "dsmon" / "dashboard",
        Path(tempfile.gettempdir()) / "dsmon-dashboard",
    ):
        try:
            root.mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK):
                return root
        except OSError:
            continue
    raise OSError("no writable cache folder for the dashboard's copy")


def _alive(pid: int) -> bool:
    """Whether a process with this number runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def streamlit_command(app: Path, port: int, address: str, module: str = "streamlit") -> list[str]:
    """The ``python -m streamlit run`` command line with the server settings.

    ``module``: ``cli.ui_child`` for a child that must end with its command (same arguments).

    Always headless: a non-headless Streamlit asks for an e-mail address on its first start
    on a machine (no ``~/.streamlit/credentials.toml``), which waits forever in a terminal
    and exits 255 without one (nohup, systemd, CI, a container). dsmon opens the browser
    itself (:func:`open_browser_when_ready`).

    No forced garbage collection after each script run (``runner.postScriptGC``): Streamlit
    runs a full ``gc.collect()`` after every run, and a live page reruns at every refresh.
    Each took 36-64 ms of the interpreter in a dashboard on a 100,000-step run, and about
    as long at a million steps (the ~140,000 objects it walks are as many at either size);
    the dashboard of ``bench/soak.py`` spent 4.59 CPU-s a minute with it, 2.65 without, its
    memory the same. A run's frames are numpy arrays, freed by reference counting, and
    Python's own collector still runs.
    """
    return [
        sys.executable, "-m", module, "run", str(app),
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--runner.postScriptGC", "false",
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


#: Addresses that listen on every interface of their family.
EVERY_INTERFACE = ("", "0.0.0.0", "::")


def dashboard_url(port: int, address: str) -> str:
    """The URL a browser on this machine opens (a wildcard address is reached on loopback)."""
    host = "127.0.0.1" if address in EVERY_INTERFACE else address
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


def check_port(port: int, flag: str, command: str, address: str | None) -> None:
    """Refuse a port TCP cannot have, or one in use on ``address``, before anything starts.

    The error is then the first and the last thing the command prints: Streamlit finds a
    port taken only once it starts, after the command said where its dashboard would be
    (and ``watch`` had started its ingest server and collector). ``address`` None: the
    number alone is checked (the server that binds it says the rest).
    """
    check_ports(command, (port, flag, address))


def check_ports(command: str, *ports: tuple[int, str, str | None]) -> None:
    """:func:`check_port` for several ``(port, flag, address)``: every number first.

    Two of them on one port of one interface are refused next: ``dashboard --port 8502``
    started its ingest API on 8502 (``--ingest-port``'s default), then told the user to stop
    what used the port, which was itself.

    A number no TCP port can have is the user's typo whatever else runs on the machine, so it
    is named even when another of the ports is taken too.
    """
    for port, flag, _ in ports:
        if not 0 < port < 65536:
            raise CommandError(f"{command}: {flag} {port}: not a TCP port (1-65535)")
    for i, (port, flag, address) in enumerate(ports):
        for other, other_flag, other_address in ports[i + 1 :]:
            if port == other and _overlap(address, other_address):
                raise CommandError(
                    f"{command}: {flag} {port}: {other_flag} is {other} too; one port cannot "
                    "serve both servers, give one of them another"
                )
    for port, flag, address in ports:
        problem = None if address is None else _bind_problem(address, port)
        if problem is not None:
            raise CommandError(
                f"{command}: {flag} {port}: cannot listen on {address}:{port} ({problem}); "
                f"stop what uses it, or give another {flag}"
            )


def _overlap(address: str | None, other: str | None) -> bool:
    """Whether servers on these addresses would want the same port of one interface.

    None is the command's own address (an option left out), so it overlaps with anything.
    """
    if address is None or other is None or address == other:
        return True
    return address in EVERY_INTERFACE or other in EVERY_INTERFACE


def _bind_problem(address: str, port: int) -> str | None:
    """Why a server could not listen on ``address:port`` now, or None when it could.

    As Streamlit's server binds (``SO_REUSEADDR``, so a port a stopped server left in
    TIME_WAIT counts as free), on every address the name resolves to.
    """
    try:
        infos = socket.getaddrinfo(
            address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return f"unknown address: {exc.strerror}"
    for family, kind, proto, _, where in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(where)
            except OSError as exc:
                return "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return None


def _launch(
    store: str, port: int, address: str, refresh_s: float, command: str, module: str = "streamlit"
) -> tuple[list[str], dict[str, str], Path]:
    """Command line, environment and folder of the Streamlit server, after checking them.

    It runs from its private copy (:func:`private_copy`), in the copy's folder, so Streamlit
    reads the ``.streamlit/config.toml`` next to ``app.py`` (theme, no telemetry).
    """
    from dsmon.store.url import redact_url  # the store's modules: loaded once a command runs

    check_port(port, "--port", command, address)
    found = app_path()
    if found is None:
        where = " or ".join(str(p) for p in app_candidates())
        raise CommandError(f"{command}: cannot find the dashboard script: no {where}")
    try:
        app = private_copy(found)
    except OSError as exc:
        raise CommandError(f"{command}: cannot copy the dashboard to run it: {exc}") from None
    from dsmon.store.url import absolute_url  # the store package: loaded when a command runs

    store = absolute_url(store)
    env = {**os.environ, STORE_ENV: store, REFRESH_ENV: str(refresh_s)}
    print(
        f"dsmon {command}: dashboard on http://{address}:{port} (store {redact_url(store)}); "
        "Ctrl-C stops it.",
        flush=True,
    )
    return streamlit_command(app, port, address, module), env, app.parent


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
    # through cli.ui_child: Streamlit ends with this process even if it is killed outright
    cmd, env, cwd = _launch(store, port, address, refresh_s, command, "cli.ui_child")
    env[PARENT_ENV] = str(os.getpid())
    try:
        child = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise CommandError(f"{command}: cannot start {cmd[0]}: {exc.strerror or exc}") from None
    if open_browser:
        open_browser_when_ready(dashboard_url(port, address), child)
    return child
