"""``dsmon collect``: the collector of one node, and the options every collecting command shares.

``collect`` runs on every node of a job and sends what it reads to an ingest server (the
dashboard's, or ``dsmon serve``); the work is :mod:`collectors.agent`'s. ``dsmon watch`` and
``dsmon run`` collect the same way and take the same options (:func:`collector_options`,
:func:`settings`, :func:`start_agent`). This module imports only what a node installs.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.errors import CommandError
from cli.supervise import wait_for_signal

if TYPE_CHECKING:  # loaded when a command runs: building the command line stays light
    from collectors.agent import Agent, Settings


def register(subparsers: Any) -> None:
    """Add the ``collect`` command."""
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
    p.set_defaults(func=run)


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
        "for watch: the file the log's launch command names, else a JSON file beside the log "
        "that reads as a DeepSpeed config; watch says which)",
    )
    p.add_argument(
        "--probe-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="folder of the per-rank probe's files (DSMON_PROBE_DIR of a job started by "
        "'dsmon run'), followed too (repeatable)",
    )
    p.add_argument(
        "--monitor-csv",
        action="append",
        default=[],
        metavar="GLOB",
        help="csv_monitor files to follow (the run's loss and learning rate; repeatable; "
        "quote the glob; default for run and watch: the ones the run's config writes)",
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


def config_files(args: argparse.Namespace) -> list[str]:
    """``--ds-config`` files; for ``watch`` without any, the run's config, found and said.

    DeepSpeed's default log level prints no config dump, and a checklist with nothing to judge
    is of little use: the file the log's launch command names (``--deepspeed_config X``), else
    a JSON file beside the log that reads as a DeepSpeed config, is taken, and said so.
    """
    if args.ds_config or not getattr(args, "config_beside_log", False):
        return list(args.ds_config)
    from dsmon.ds_config.find import find_config

    found = find_config(Path(args.log[0]), [Path.cwd()])
    if found is None:
        print(
            "dsmon watch: no DeepSpeed config found (the log names none, and no JSON file "
            "beside it reads as one): the checklist judges what the log prints (--ds-config F)"
        )
        return []
    print(
        f"dsmon watch: judging the DeepSpeed config {found.path} ({found.how}; "
        "--ds-config F: another)"
    )
    return [str(found.path)]


def monitor_globs(configs: Sequence[str], roots: Sequence[Path]) -> list[str]:
    """The csv_monitor files the job's config makes DeepSpeed write (followed too).

    A config that cannot be read names none: the checklist says what is wrong with it.
    """
    from dsmon.ds_config.outputs import csv_monitor_globs
    from dsmon.parse.side_files import FileFormatError, load_config_text

    out: list[str] = []
    for name in configs:
        try:
            config = load_config_text(Path(name).read_text(encoding="utf-8"), name)
        except (OSError, UnicodeDecodeError, FileFormatError):
            continue
        out += [g for g in csv_monitor_globs(config, roots) if g not in out]
    return out


def settings(args: argparse.Namespace, spool_max_bytes: int) -> Settings:
    """The collector's settings from parsed ``collect``/``watch``/``run`` options."""
    from collectors.agent import Settings, default_state_dir
    from dsmon.parse.run_files import run_name

    node = args.node or socket.gethostname()
    run = args.run or run_name(args.log[0])
    configs = config_files(args)
    monitor = list(args.monitor_csv)
    if getattr(args, "config_beside_log", False):  # watch: the csv_monitor its config names
        roots = [Path(args.log[0]).resolve().parent, Path.cwd()]
        monitor += [g for g in monitor_globs(configs, roots) if g not in monitor]
    return Settings(
        logs=args.log,
        run=run,
        node=node,
        state_dir=Path(args.state_dir) if args.state_dir else default_state_dir(run, node),
        profile_files=args.profile_file,
        config_files=configs,
        monitor_files=monitor,
        probe_dirs=args.probe_dir,
        from_end=args.from_end,
        gpus=args.gpus,
        nvml_interval_s=args.nvml_interval,
        tail_interval_s=args.poll_interval,
        retry_max_s=args.retry_max,
        release_at_stop=args.release_at_stop,
        spool_max_bytes=spool_max_bytes,
    )


def start_agent(args: argparse.Namespace, url: str, token: str, spool_max_bytes: int) -> Agent:
    """The agent for parsed collector options, sending to ``url``, said on stderr; not started.

    Raises:
        ValueError: ``url`` is not an http(s) URL.
        CommandError: a bad GPU selection, or a state folder another collector holds.
    """
    from collectors.agent import StateDirBusyError, build_agent
    from collectors.gpu.selection import SelectionError

    s = settings(args, spool_max_bytes)
    try:
        agent = build_agent(s, url, token, os.environ)
    except SelectionError as exc:
        raise CommandError(str(exc)) from None
    except StateDirBusyError as exc:
        raise CommandError(f"collect: {exc}") from None
    print(
        f"dsmon: collecting run {s.run!r} on node {s.node!r} from "
        f"{' '.join([*s.logs, *s.probe_dirs])} to {url} "
        f"(state {s.state_dir})",
        file=sys.stderr,
        flush=True,
    )
    return agent


def grace_s(args: argparse.Namespace) -> float:
    """The stop's grace period: ``--stop-timeout``, else the agent's own default.

    The default is read when a command runs, so that building the parser loads no collector.
    """
    from collectors.agent import STOP_TIMEOUT_S

    return STOP_TIMEOUT_S if args.stop_timeout is None else float(args.stop_timeout)


def log_to_stderr() -> None:
    """The collector's warnings (outage, spool full, NVML missing) as plain stderr lines."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """``dsmon collect``: run until SIGINT or SIGTERM."""
    from dsmon.serve.tokens import TokenError, load_token

    log_to_stderr()
    try:
        token = load_token(args.token_file)
    except TokenError as exc:
        raise CommandError(f"collect: {exc}") from None
    if token is None:
        raise CommandError("collect: no token: pass --token-file F or set $DSMON_TOKEN")
    try:
        agent = start_agent(args, args.server, token, int(args.spool_max_mb * (1 << 20)))
    except ValueError as exc:
        raise CommandError(f"collect: --server: {exc}") from None
    agent.start()
    wait_for_signal(lambda: not agent.alive)
    agent.stop(grace_s(args))
    return 0
