"""The user's training job, started with the per-rank probe, its output teed to a log.

DeepSpeed's own output comes from rank 0; the probe (``collectors/probe``) times every rank
from the inside. ``dsmon run`` starts the user's launch command unchanged except for two
environment variables (:func:`probe_env`): ``PYTHONPATH`` gets the probe's ``boot`` folder
first (its ``sitecustomize`` loads the probe in every Python process the launcher starts, and
chains to the environment's own ``sitecustomize``), and ``DSMON_PROBE_DIR`` names the folder
of the per-rank files. The job's output is shown as usual and also written to a log
(:func:`start_job`), which the collector follows with the probe's files.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

import collectors.probe
from dsmon.parse.launches import RUN_END_TEXT, RUN_START_LOGGER

#: The variable the probe reads (``collectors.probe.patch.DIR_ENV``).
PROBE_DIR_ENV = "DSMON_PROBE_DIR"
#: The folder whose ``sitecustomize`` loads the probe.
BOOT_DIR = Path(collectors.probe.__file__).resolve().parent / "boot"
#: Seconds a job that got Ctrl-C with dsmon run is given to end on its own, before SIGTERM.
JOB_OWN_STOP_S = 10.0
#: Seconds a job is given to end after SIGTERM before it is killed.
JOB_STOP_S = 30.0


def copy_probe(dest: Path) -> Path:
    """Copy the probe into ``dest`` (for a training environment without dsmon).

    Only the files' contents are copied, into folders this process makes; ``dest``'s own mode
    and times are left alone. It is often a volume's mount point that another user owns: a
    Kubernetes emptyDir is root's, mode 0777, and the init container runs as dsmon's uid, so
    copying a tree's metadata onto it (what ``shutil.copytree`` does to every folder) fails.

    Returns the folder to put first on the job's ``PYTHONPATH``.

    Raises:
        OSError: the folder cannot be written.
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
    return dest.resolve() / BOOT_DIR.name


def probe_env(env: Mapping[str, str], probe_dir: Path) -> dict[str, str]:
    """The job's environment: ``env`` with the probe's boot folder and its output folder."""
    out = dict(env)
    path = [str(BOOT_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    out["PYTHONPATH"] = os.pathsep.join(path)
    out[PROBE_DIR_ENV] = str(probe_dir.resolve())
    return out


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
    """The running job, the thread copying its output, and the log it goes to."""

    proc: subprocess.Popen[bytes]
    tee: threading.Thread
    log: Path | None = None

    def stop(self, own_s: float = 0.0) -> int:
        """SIGTERM (DeepSpeed's launcher passes it to the ranks), SIGKILL after a while.

        ``own_s``: seconds the job is first given to end on its own. Ctrl-C reaches the job's
        processes as it reaches dsmon run (one process group), and their launcher is already
        stopping them: a SIGTERM sent at once ended DeepSpeed's ``deepspeed`` command by that
        signal (status -15), which read as a stop from outside by SIGTERM.

        Returns the job's return code (negative: killed by that signal), which it also writes
        at the end of the log (:func:`run_end_line`): what ends the run for dsmon, under any
        launcher, where DeepSpeed's launcher lines are missing (torchrun) or cut short.
        """
        if own_s > 0 and self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # still going: stopped below
                self.proc.wait(timeout=own_s)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=JOB_STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.tee.join(timeout=5)
        code = self.proc.returncode if self.proc.returncode is not None else 0
        if self.log is not None:
            try:
                with self.log.open("a", encoding="utf-8") as f:
                    f.write(run_end_line(code, datetime.now()) + "\n")
            except OSError:
                pass  # the log's folder went away: the status is still returned
        return code


def _stamp(at: datetime) -> str:
    """DeepSpeed's logger's time: ``2026-12-06 04:34:57,114``."""
    return f"{at:%Y-%m-%d %H:%M:%S},{at.microsecond // 1000:03d}"


def run_end_line(code: int, at: datetime) -> str:
    """The line ``dsmon run`` writes after the job's output: its exit status, in the logger's format.

    A negative status is the signal that ended the launch command (``-9``: SIGKILL).
    """
    return f"[{_stamp(at)}] [INFO] [{RUN_START_LOGGER}:0:run] {RUN_END_TEXT} {code}"


def run_start_line(cmd: Sequence[str], at: datetime) -> str:
    """The line ``dsmon run`` writes before the job's output, in DeepSpeed's logger format.

    Its header gives the log a time from the first line on, and its logger
    (:data:`dsmon.parse.launches.RUN_START_LOGGER`) tells the parser the job's output begins here,
    so that the timer lines are numbered by step even when nothing else of the job's start
    is printed.
    """
    return (
        f"[{_stamp(at)}] [INFO] [{RUN_START_LOGGER}:0:run] dsmon run starts the job: "
        f"{shlex.join(cmd)}"
    )


def start_job(cmd: Sequence[str], env: Mapping[str, str], log: Path) -> Job:
    """The job, its output teed to ``log`` and this process's stdout.

    The log first gets a line of dsmon's own (:func:`run_start_line`): at
    DeepSpeed's default log level under ``torchrun``, nothing else says where the job's
    output begins, and without it the timer lines could not be numbered by step.

    Raises:
        OSError: the command cannot be started.
    """
    with log.open("a", encoding="utf-8") as f:
        f.write(run_start_line(cmd, datetime.now()) + "\n")
    proc = subprocess.Popen(
        list(cmd), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    return Job(proc, _tee(proc.stdout, log, sys.stdout.buffer), log)
