"""``dsmon collect`` and ``dsmon watch``: the node-side commands, added through an entry point.

``collect`` runs on every node of a job and sends what it reads to the dashboard's ingest
server; ``watch`` is the one-machine form with nothing to configure: it starts an ingest
server (on a free port, with a fresh token it never has to show), a collector pointed at it,
and the Streamlit dashboard. Both live here, not in ``dsmon/commands/``, because the core
never imports node-side code (NVML, watchdog); ``pyproject.toml`` registers this module in the
``dsmon.commands`` entry-point group, which ``dsmon.cli`` reads.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import IO, Any

from collectors.agent import STOP_TIMEOUT_S, Agent
from collectors.gpu_select import Selection, SelectionError, choose_selection
from collectors.nvml import NvmlPoller
from collectors.sender import Sender
from collectors.spool import Spool
from collectors.state import StateFile
from collectors.tailer import Tailer
from collectors.transport import UrlTransport
from dsmon.commands import CommandError, default_store
from dsmon.commands._alerting import add_alert_options, start_watcher, stop_watcher
from dsmon.commands._supervise import child_failed, end_child, wait_for_signal
from dsmon.commands.dashboard import (
    add_server_options,
    check_port,
    dashboard_url,
    start_streamlit,
)
from dsmon.parse.run_files import run_name
from dsmon.serve.tokens import TokenError, generate_token, load_token, resolve_token, token_banner
from dsmon.store.url import absolute_url

logger = logging.getLogger(__name__)

#: Where collectors keep their state and spool unless ``--state-dir`` says otherwise.
STATE_HOME_ENV = "XDG_STATE_HOME"


def register(subparsers: Any) -> None:
    """Add the ``collect``, ``watch`` and ``run`` commands."""
    p = subparsers.add_parser(
        "collect",
        help="tail DeepSpeed logs and poll NVML on this node, send to the dashboard",
        description="Follow the logs matching --log (rotation, restarts and outages "
        "included: every line is delivered once), sample the GPUs, and POST the records "
        "to the dashboard's ingest server.",
    )
    collector_options(p)
    p.add_argument("--server", required=True, help="the dashboard's ingest URL (http://HOST:8502)")
    p.add_argument("--token-file", help="file holding the ingest token (else $DSMON_TOKEN)")
    p.add_argument("--spool-max-mb", type=float, default=1024, help="on-disk spool bound (1024)")
    p.set_defaults(func=run_collect)
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
    w.set_defaults(func=run_watch, config_beside_log=True)
    from collectors import run_cmd  # imports this module: registered last

    run_cmd.register(subparsers)


def collector_options(p: argparse.ArgumentParser, log_flag: bool | None = True) -> None:
    """The options every collecting command has; ``log_flag`` None: the command names the log."""
    if log_flag is None:
        pass
    elif log_flag:
        p.add_argument(
            "--log",
            action="append",
            required=True,
            metavar="GLOB",
            help="log file or glob to follow (repeatable; quote the glob)",
        )
    else:
        p.add_argument("log", nargs="+", metavar="LOG", help="log file(s) or glob(s) to follow")
    p.add_argument(
        "--profile-file",
        action="append",
        default=[],
        metavar="F",
        help="the flops profiler's output_file, re-read when rewritten (repeatable)",
    )
    p.add_argument(
        "--ds-config",
        action="append",
        default=[],
        metavar="F",
        help="the run's DeepSpeed config file, for the health checklist (repeatable; default "
        "for watch: ds_config.json beside the log, when there is one)",
    )
    p.add_argument(
        "--probe-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="folder of the per-rank probe's files (DSMON_PROBE_DIR of a job started by "
        "'dsmon run'), followed too (repeatable)",
    )
    p.add_argument("--node", help="node name (default: this host's name)")
    p.add_argument("--run", help="run name (default: the log's folder name)")
    p.add_argument(
        "--nvml-interval",
        type=float,
        default=1.0,
        help="seconds between GPU samples, 0 for none (default 1)",
    )
    p.add_argument("--state-dir", help="positions and spool (default: $XDG_STATE_HOME/dsmon/...)")
    p.add_argument(
        "--from-end", action="store_true", help="skip what the logs hold now; follow only new lines"
    )
    p.add_argument("--poll-interval", type=float, default=0.5, help="log poll period (0.5 s)")
    p.add_argument(
        "--retry-max",
        type=float,
        default=30.0,
        help="longest wait between retries while the server is away (30 s)",
    )
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="GPUs to sample: GPU-/MIG- UUIDs or NVML indices, comma-separated, @FILE or "
        "'all' (default: $DSMON_GPUS, else $CUDA_VISIBLE_DEVICES/$NVIDIA_VISIBLE_DEVICES "
        "when they hold a list, else all)",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=STOP_TIMEOUT_S,
        metavar="SECONDS",
        help="on SIGTERM/Ctrl-C: time to read the logs one last time and deliver or spool "
        "everything (20 s)",
    )
    stop = p.add_mutually_exclusive_group()
    stop.add_argument(
        "--release-at-stop",
        action="store_true",
        help="at a stop, also send what the parser still holds (an unterminated last line, "
        "an open block), for a log cut off for good whose collector is not started again",
    )
    stop.add_argument(
        "--hold-at-stop",
        action="store_true",
        help="keep back what the parser still holds at a stop (the default)",
    )


def default_state_dir(run: str, node: str) -> Path:
    """``$XDG_STATE_HOME/dsmon/collect/<run>@<node>`` (``~/.local/state`` by default)."""
    home = os.environ.get(STATE_HOME_ENV) or str(Path.home() / ".local" / "state")
    safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", f"{run}@{node}")
    return Path(home) / "dsmon" / "collect" / safe


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold the state folder for this process: two collectors on one spool would corrupt it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    f = open(state_dir / "lock", "w")  # noqa: SIM115 - held open for the process's lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise CommandError(f"collect: {state_dir} is in use by another collector") from None
    return f


def config_files(args: argparse.Namespace) -> list[str]:
    """``--ds-config`` files; for ``watch`` without any, a ``ds_config.json`` beside the log.

    DeepSpeed's default log level prints no config dump, and a checklist with nothing to judge
    is of little use: the file the job was most likely started with is taken, and said so.
    """
    if args.ds_config or not getattr(args, "config_beside_log", False):
        return list(args.ds_config)
    beside = Path(args.log[0]).parent / "ds_config.json"
    if beside.is_file():
        print(f"dsmon watch: reading the DeepSpeed config {beside} (--ds-config F: another)")
        return [str(beside)]
    return []


def build_agent(args: argparse.Namespace, url: str, token: str, spool_max_bytes: int) -> Agent:
    """The agent for parsed ``collect``/``watch`` options, sending to ``url``."""
    transport = UrlTransport(url, token)  # a bad URL fails here, before anything is locked
    try:
        gpus = choose_selection(args.gpus, os.environ)
    except SelectionError as exc:
        raise CommandError(str(exc)) from None
    node = args.node or socket.gethostname()
    run = args.run or run_name(args.log[0])
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir(run, node)
    args.lock = lock_state_dir(state_dir)
    tailer = Tailer(
        args.log,
        run=run,
        node=node,
        state=StateFile(state_dir / "tail.json"),
        profile_files=args.profile_file,
        config_files=config_files(args),
        from_end=args.from_end,
        probe_dirs=args.probe_dir,
    )
    spool = Spool(state_dir / "spool", max_bytes=spool_max_bytes)
    sender = Sender(transport, spool, backoff_s=(0.5, args.retry_max))
    poller = _nvml_poller(run, node, gpus) if args.nvml_interval > 0 else None
    print(
        f"dsmon: collecting run {run!r} on node {node!r} from "
        f"{' '.join([*args.log, *args.probe_dir])} to {url} "
        f"(state {state_dir})",
        file=sys.stderr,
        flush=True,
    )
    return Agent(
        tailer,
        sender,
        poller,
        tail_interval_s=args.poll_interval,
        nvml_interval_s=args.nvml_interval or 1.0,
        release_at_stop=args.release_at_stop,
    )


def _nvml_poller(run: str, node: str, gpus: Selection | None) -> NvmlPoller | None:
    """The NVML poller, or None with one line when there are no NVML bindings or driver."""
    try:
        import pynvml
    except ImportError:
        logger.warning("dsmon: nvidia-ml-py is not installed: no GPU samples; logs go on")
        return None
    poller = NvmlPoller(pynvml, run=run, node=node, select=gpus)
    return poller if poller.start() else None


def run_collect(args: argparse.Namespace) -> int:
    """``dsmon collect``: run until SIGINT or SIGTERM."""
    log_to_stderr()
    try:
        token = load_token(args.token_file)
    except TokenError as exc:
        raise CommandError(f"collect: {exc}") from None
    if token is None:
        raise CommandError("collect: no token: pass --token-file F or set $DSMON_TOKEN")
    try:
        agent = build_agent(args, args.server, token, int(args.spool_max_mb * (1 << 20)))
    except ValueError as exc:
        raise CommandError(f"collect: --server: {exc}") from None
    agent.start()
    wait_for_signal(lambda: not agent.alive)
    agent.stop(args.stop_timeout)
    return 0


def run_watch(args: argparse.Namespace) -> int:
    """``dsmon watch LOG``: ingest server, collector and dashboard until Ctrl-C."""
    log_to_stderr()
    store = absolute_url(args.store or default_store())
    check_port(args.port, "--port", "watch")
    if args.ingest_port:
        check_port(args.ingest_port, "--ingest-port", "watch")
    token, shown = _watch_token(args)
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
        agent = build_agent(args, ingest.url, token, 1 << 30)
        ui = start_streamlit(
            store, args.port, args.address, args.refresh, not args.no_browser, command="watch"
        )
        try:
            agent.start()
            signalled = wait_for_signal(lambda: ui.poll() is not None or not agent.alive)
            ui_ended = ui.poll() is not None  # the dashboard ended by itself
            agent.stop(args.stop_timeout)
        finally:
            end_child(ui)
    finally:
        ingest.stop()
        stop_watcher(watcher)
    if ui_ended and not signalled:
        child_failed(ui, "watch")
    return 0


def _watch_token(args: argparse.Namespace) -> tuple[str, bool]:
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


def log_to_stderr() -> None:
    """The collector's warnings (outage, spool full, NVML missing) as plain stderr lines."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
