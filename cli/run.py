"""``dsmon run -- deepspeed train.py ...``: start a job with the per-rank probe and follow it.

The job is started by :mod:`collectors.job` (the probe in every rank, its output teed to
``<dir>/train.log``); a collector (:mod:`cli.collect`) follows that log and the probe's files,
and sends to the dashboard started here (as ``dsmon watch`` does), to the store alone
(``--no-dashboard``), or to another dashboard's ingest server (``--server``: all a training
node's install needs). The command exits with the job's status.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.collect import collector_options, grace_s, log_to_stderr, monitor_globs, start_agent
from cli.errors import CommandError
from cli.extras import require_full
from cli.supervise import end_child, exit_status, stop_on_signals, wait_for_signal
from cli.ui_server import (
    add_server_options,
    check_port,
    dashboard_url,
    start_streamlit,
    wait_until_ready,
)
from dsmon.env import default_store
from dsmon.serve.tokens import TokenError, generate_token, load_token

if TYPE_CHECKING:  # loaded when the command runs: building the command line stays light
    from collectors.agent import Agent
    from dsmon.serve.run import IngestServer


def register(subparsers: Any) -> None:
    """Add the ``run`` command."""
    p = subparsers.add_parser(
        "run",
        help="start a training job with the per-rank probe, and follow it live",
        description="Start a DeepSpeed, torchrun or accelerate launch command unchanged, with "
        "dsmon's probe in every rank (per-rank step times and heartbeats), and follow its "
        "output and the probe's files: with a dashboard here (default), into the store "
        "alone (--no-dashboard), or sent to a dashboard's ingest server (--server).",
    )
    p.add_argument(
        "--dir",
        help="folder of the job's log (train.log) and the probe's files (probe/); default "
        "dsmon-runs/<run>",
    )
    collector_options(p, log_flag=None)
    add_server_options(p)
    p.add_argument("--store", help="store path or URL (default: $DSMON_STORE or ./dsmon.sqlite)")
    p.add_argument("--no-dashboard", action="store_true", help="collect into the store only")
    p.add_argument("--server", help="send to this ingest URL instead of a local store")
    p.add_argument("--token-file", help="with --server: file holding the ingest token")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the job")
    p.set_defaults(func=run)


def _job_command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CommandError("run: no command: dsmon run [options] -- deepspeed train.py ...", 2)
    return cmd


def _prepare(args: argparse.Namespace) -> Path:
    """The run's folder; sets the collector options ``run`` implies (log, probe, name)."""
    from dsmon.ds_config.find import config_in

    if not args.run:
        args.run = Path(args.dir).resolve().name if args.dir else time.strftime("run-%Y%m%d-%H%M%S")
    folder = Path(args.dir or Path("dsmon-runs") / args.run).resolve()
    (folder / "probe").mkdir(parents=True, exist_ok=True)
    args.log = [str(folder / "train.log")]
    args.probe_dir = [*args.probe_dir, str(folder / "probe")]
    if not args.ds_config:
        args.ds_config = [c for c in [config_in(args.command)] if c and Path(c).is_file()]
    args.monitor_csv = [*args.monitor_csv, *monitor_globs(args.ds_config, [Path.cwd()])]
    if not args.hold_at_stop:
        args.release_at_stop = True  # the collector stops when the job has ended: its end
    return folder


def _destination(args: argparse.Namespace) -> tuple[str, str, IngestServer | None]:
    """Where the collector sends: ``--server``, or an ingest server started here."""
    if args.server:
        try:
            token = load_token(args.token_file)
        except TokenError as exc:
            raise CommandError(f"run: {exc}") from None
        if token is None:
            raise CommandError("run: --server needs --token-file F or $DSMON_TOKEN")
        return args.server, token, None
    token = generate_token()
    from dsmon.store.url import absolute_url  # the store package: loaded when a command runs

    store = absolute_url(args.store or default_store())
    from dsmon.serve.run import ServeError, start_ingest_server  # the server stack, only here

    try:
        ingest = start_ingest_server(store, token, "127.0.0.1", 0)
    except (ServeError, TokenError) as exc:
        raise CommandError(f"run: {exc}") from None
    return ingest.url, token, ingest


def run(args: argparse.Namespace) -> int:
    """``dsmon run``: the job, its collector and (by default) the dashboard, until the job ends."""
    log_to_stderr()
    cmd = _job_command(args)
    if not args.server:  # a store and an ingest server here: the full install's packages
        require_full("run")
    dashboard = not (args.no_dashboard or args.server)
    if dashboard:
        check_port(args.port, "--port", "run", args.address)
    folder = _prepare(args)
    url, token, ingest = _destination(args)
    ui = None
    try:
        try:
            agent = start_agent(args, url, token, 1 << 30)
        except ValueError as exc:  # only --server can be a URL that is not one
            raise CommandError(f"run: --server: {exc}") from None
        if dashboard:
            from dsmon.store.url import absolute_url

            store = absolute_url(args.store or default_store())
            ui = start_streamlit(
                store, args.port, args.address, args.refresh, not args.no_browser, command="run"
            )
        agent.start()
        try:
            status = _follow_job(cmd, folder, agent, ui, dashboard_url(args.port, args.address))
        finally:
            agent.stop(grace_s(args))
    finally:
        if ui is not None:
            end_child(ui)
        if ingest is not None:
            ingest.stop()
    return status


def _follow_job(
    cmd: Sequence[str],
    folder: Path,
    agent: Agent,
    ui: subprocess.Popen[bytes] | None,
    ui_url: str,
) -> int:
    """Run the job to its end (or a signal); keep the dashboard (at ``ui_url``) up until Ctrl-C."""
    from collectors.job import JOB_OWN_STOP_S, probe_env, start_job

    stop = stop_on_signals()
    try:
        job = start_job(cmd, probe_env(os.environ, folder / "probe"), folder / "train.log")
    except OSError as exc:
        raise CommandError(f"run: cannot start {cmd[0]}: {exc.strerror or exc}") from None
    print(
        f"dsmon run: job started (pid {job.proc.pid}); log {folder / 'train.log'}, probe files "
        f"{folder / 'probe'}",
        file=sys.stderr,
        flush=True,
    )
    wait_for_signal(lambda: job.proc.poll() is not None, stop)
    status = exit_status(job.stop(JOB_OWN_STOP_S if stop.signum == signal.SIGINT else 0.0))
    if ui is not None and not stop.is_set():
        # A short job can end before Streamlit is up: say the dashboard is up once it is.
        wait_until_ready(ui_url, ui, stop=stop)
        print(
            f"dsmon run: the job ended with status {status}; the dashboard at {ui_url} stays "
            "up until Ctrl-C",
            file=sys.stderr,
            flush=True,
        )
        wait_for_signal(lambda: ui.poll() is not None or not agent.alive, stop)
    return status
