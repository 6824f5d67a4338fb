"""``dsmon run -- deepspeed train.py ...``: start a job with the per-rank probe and follow it.

DeepSpeed's own output comes from rank 0; the probe (``collectors/probe``) times every rank
from the inside. This command starts the user's launch command unchanged except for two
environment variables: ``PYTHONPATH`` gets the probe's ``boot`` folder first (its
``sitecustomize`` loads the probe in every Python process the launcher starts, and chains to
the environment's own ``sitecustomize``), and ``DSMON_PROBE_DIR`` names the folder of the
per-rank files. The job's output is shown as usual and also written to ``<dir>/train.log``;
a collector follows that log and the probe's files, and sends to the dashboard started here
(as ``dsmon watch`` does), to the store alone (``--no-dashboard``), or to another dashboard's
ingest server (``--server``). The command exits with the job's status.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import collectors.probe
from collectors.agent import Agent
from collectors.commands import build_agent, collector_options, log_to_stderr

if TYPE_CHECKING:
    from dsmon.serve.run import IngestServer

from dsmon.commands import CommandError, default_store
from dsmon.commands._supervise import end_child, exit_status, stop_on_signals, wait_for_signal
from dsmon.commands.dashboard import (
    absolute_store,
    add_server_options,
    check_port,
    dashboard_url,
    start_streamlit,
    wait_until_ready,
)
from dsmon.parse.launches import RUN_START_LOGGER
from dsmon.serve.tokens import TokenError, generate_token, load_token

#: The variable the probe reads (``collectors.probe.patch.DIR_ENV``).
PROBE_DIR_ENV = "DSMON_PROBE_DIR"
#: The folder whose ``sitecustomize`` loads the probe.
BOOT_DIR = Path(collectors.probe.__file__).resolve().parent / "boot"
#: Seconds a job is given to end after SIGTERM before it is killed.
JOB_STOP_S = 30.0


def register(subparsers: Any) -> None:
    """Add the ``run`` and ``probe`` commands."""
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
    p.set_defaults(func=run_job)
    e = subparsers.add_parser(
        "probe",
        help="copy the per-rank probe into a folder, for a training environment without dsmon",
        description="Copy the per-rank probe that 'dsmon run' loads into a folder (a volume "
        "shared with a training container, for example) and print the two environment "
        "variables that turn it on in a job started without 'dsmon run'.",
    )
    e.add_argument("folder", metavar="DIR", help="where to copy the probe (created)")
    e.add_argument(
        "--probe-dir",
        default="/logs/probe",
        metavar="DIR",
        help="the folder the ranks will write to, for the printed DSMON_PROBE_DIR "
        "(default /logs/probe)",
    )
    e.set_defaults(func=export_probe)


def export_probe(args: argparse.Namespace) -> int:
    """``dsmon probe DIR``: the probe's files in ``DIR``, and how to turn it on."""
    dest = Path(args.folder)
    try:
        copy_probe_files(dest)
    except OSError as exc:
        raise CommandError(f"probe: cannot copy to {dest}: {exc.strerror or exc}") from None
    print(f"PYTHONPATH={dest.resolve() / BOOT_DIR.name}")
    print(f"{PROBE_DIR_ENV}={args.probe_dir}")
    return 0


def copy_probe_files(dest: Path) -> None:
    """The probe's files into ``dest`` (created if missing), its own mode and times untouched.

    ``dest`` is often a volume's mount point that another user owns: a Kubernetes emptyDir is
    root's, mode 0777, and the init container runs as dsmon's uid. Copying a tree's metadata
    onto it (what ``shutil.copytree`` does to every folder) is refused there, so only the
    files' contents are copied, into folders this process makes.
    """
    src = BOOT_DIR.parent
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.rglob("*")):
        if "__pycache__" in path.relative_to(src).parts:
            continue
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        else:
            shutil.copyfile(path, target)


def probe_env(env: Mapping[str, str], probe_dir: Path) -> dict[str, str]:
    """The job's environment: ``env`` with the probe's boot folder and its output folder."""
    out = dict(env)
    path = [str(BOOT_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    out["PYTHONPATH"] = os.pathsep.join(path)
    out[PROBE_DIR_ENV] = str(probe_dir.resolve())
    return out


def _job_command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CommandError("run: no command: dsmon run [options] -- deepspeed train.py ...", 2)
    return cmd


def _prepare(args: argparse.Namespace) -> Path:
    """The run's folder; sets the collector options ``run`` implies (log, probe, name)."""
    if not args.run:
        args.run = Path(args.dir).resolve().name if args.dir else time.strftime("run-%Y%m%d-%H%M%S")
    folder = Path(args.dir or Path("dsmon-runs") / args.run).resolve()
    (folder / "probe").mkdir(parents=True, exist_ok=True)
    args.log = [str(folder / "train.log")]
    args.probe_dir = [*args.probe_dir, str(folder / "probe")]
    if not args.ds_config:
        args.ds_config = [c for c in [_config_in(args.command)] if c and Path(c).is_file()]
    if not args.hold_at_stop:
        args.release_at_stop = True  # the collector stops when the job has ended: its end
    return folder


#: Options that name the job's ds_config: DeepSpeed's, and the Hugging Face Trainer's
#: ``--deepspeed ds_config.json`` (DeepSpeed's own ``--deepspeed`` is a flag without a value).
_CONFIG_OPTIONS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")


def _config_in(cmd: Sequence[str]) -> str | None:
    """The ds_config file the job is given (``--deepspeed_config``, Trainer's ``--deepspeed``)."""
    for i, arg in enumerate(cmd):
        option, eq, value = arg.partition("=")
        if option not in _CONFIG_OPTIONS:
            continue
        if not eq:
            value = cmd[i + 1] if i + 1 < len(cmd) else ""
        if option == "--deepspeed" and not value.endswith(".json"):
            continue  # DeepSpeed's flag, followed by the next option or a script's argument
        if value and not value.startswith("-"):
            return value
    return None


def _tee(src: IO[bytes], log: Path, out: IO[bytes]) -> threading.Thread:
    """Copy the job's output to the terminal and the log, as it comes."""

    def copy() -> None:
        with log.open("ab") as f:
            while chunk := src.read1(1 << 16):  # type: ignore[attr-defined]
                f.write(chunk)
                f.flush()
                try:
                    out.write(chunk)
                    out.flush()
                except (OSError, ValueError):
                    pass  # no terminal to show it on: the log still has it

    t = threading.Thread(target=copy, name="dsmon-tee", daemon=True)
    t.start()
    return t


@dataclass(slots=True)
class Job:
    """The running job and the thread copying its output."""

    proc: subprocess.Popen[bytes]
    tee: threading.Thread

    def stop(self) -> int:
        """SIGTERM (DeepSpeed's launcher passes it to the ranks), SIGKILL after a while.

        Returns the job's status as a shell reports it (128 + N when killed by signal N).
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=JOB_STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.tee.join(timeout=5)
        return exit_status(self.proc.returncode if self.proc.returncode is not None else 0)


def run_start_line(cmd: Sequence[str], at: datetime) -> str:
    """The line ``dsmon run`` writes before the job's output, in DeepSpeed's logger format.

    Its header gives the log a time from the first line on, and its logger
    (:data:`dsmon.parse.launches.RUN_START_LOGGER`) tells the parser the job's output begins here,
    so that the timer lines are numbered by step even when nothing else of the job's start
    is printed.
    """
    stamp = f"{at:%Y-%m-%d %H:%M:%S},{at.microsecond // 1000:03d}"
    return (
        f"[{stamp}] [INFO] [{RUN_START_LOGGER}:0:run] dsmon run starts the job: {shlex.join(cmd)}"
    )


def start_job(cmd: Sequence[str], env: Mapping[str, str], log: Path) -> Job:
    """The job, its output teed to ``log`` and this process's stdout.

    The log first gets a line of dsmon's own (:func:`run_start_line`): at
    DeepSpeed's default log level under ``torchrun``, nothing else says where the job's
    output begins, and without it the timer lines could not be numbered by step.
    """
    with log.open("a", encoding="utf-8") as f:
        f.write(run_start_line(cmd, datetime.now()) + "\n")
    try:
        proc = subprocess.Popen(
            list(cmd), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    except OSError as exc:
        raise CommandError(f"run: cannot start {cmd[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    return Job(proc, _tee(proc.stdout, log, sys.stdout.buffer))


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
    store = absolute_store(args.store or default_store())
    from dsmon.serve.run import ServeError, start_ingest_server  # the server stack, only here

    try:
        ingest = start_ingest_server(store, token, "127.0.0.1", 0)
    except (ServeError, TokenError) as exc:
        raise CommandError(f"run: {exc}") from None
    return ingest.url, token, ingest


def run_job(args: argparse.Namespace) -> int:
    """``dsmon run``: the job, its collector and (by default) the dashboard, until the job ends."""
    log_to_stderr()
    cmd = _job_command(args)
    dashboard = not (args.no_dashboard or args.server)
    if dashboard:
        check_port(args.port, "--port", "run")
    folder = _prepare(args)
    url, token, ingest = _destination(args)
    ui = None
    try:
        agent = build_agent(args, url, token, 1 << 30)
        if dashboard:
            store = absolute_store(args.store or default_store())
            ui = start_streamlit(
                store, args.port, args.address, args.refresh, not args.no_browser, command="run"
            )
        agent.start()
        try:
            status = _supervise(cmd, folder, agent, ui, dashboard_url(args.port, args.address))
        finally:
            agent.stop(args.stop_timeout)
    finally:
        if ui is not None:
            end_child(ui)
        if ingest is not None:
            ingest.stop()
    return status


def _supervise(
    cmd: Sequence[str],
    folder: Path,
    agent: Agent,
    ui: subprocess.Popen[bytes] | None,
    ui_url: str,
) -> int:
    """Run the job to its end (or a signal); keep the dashboard (at ``ui_url``) up until Ctrl-C."""
    stop = stop_on_signals()
    job = start_job(cmd, probe_env(os.environ, folder / "probe"), folder / "train.log")
    print(
        f"dsmon run: job started (pid {job.proc.pid}); log {folder / 'train.log'}, probe files "
        f"{folder / 'probe'}",
        file=sys.stderr,
        flush=True,
    )
    wait_for_signal(lambda: job.proc.poll() is not None, stop)
    status = job.stop()
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
