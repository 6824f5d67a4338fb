"""Running a REAL DeepSpeed job from a test: the launcher, processes, ports and waiting.

DeepSpeed and torch live in their own virtualenv, as a user's training environment does:
``$DSMON_DEEPSPEED_BIN`` names its ``bin`` folder (``.ci/run`` builds it), else ``deepspeed``
on ``PATH`` is used. Without it a test is skipped, unless ``DSMON_REQUIRE_DEEPSPEED=1``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import process_support
import pytest

#: Generous: DeepSpeed's start-up alone takes 10-60 s on a busy 2-core machine.
DEADLINE_S = 240.0


#: Where DeepSpeed keeps the ops it builds at a job's start (the CPU comm op, CPU Adam: minutes
#: on two cores): one build for every job of the suite, whatever HOME a test gives the job.
TORCH_EXTENSIONS = Path.home() / ".cache" / "torch_extensions"


def extensions_dir(ds_bin: Path) -> Path:
    """The ops build of one DeepSpeed environment, kept apart from any other's.

    A build's commands name the environment's include paths: two environments sharing one
    folder (two checkouts, a CI copy) made every job rebuild the other's ops, minutes each,
    and a job killed mid-build held up the next.
    """
    key = hashlib.sha1(str(ds_bin.resolve()).encode()).hexdigest()[:10]
    return TORCH_EXTENSIONS / f"{ds_bin.resolve().parent.name}-{key}"


def job_env(ds_bin: Path, home: Path) -> dict[str, str]:
    """The environment of a training job: no DSMON_ variables, its own HOME, one ops build."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    env.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir(ds_bin)))
    env.update(HOME=str(home), PATH=f"{ds_bin}{os.pathsep}{env.get('PATH', '')}")
    return env


def deepspeed_bin() -> Path:
    found = os.environ.get("DSMON_DEEPSPEED_BIN")
    launcher = Path(found) / "deepspeed" if found else shutil.which("deepspeed")
    if launcher is None or not Path(launcher).exists():
        reason = "no DeepSpeed: set $DSMON_DEEPSPEED_BIN to a venv's bin with torch + deepspeed"
        if os.environ.get("DSMON_REQUIRE_DEEPSPEED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return Path(launcher).parent


def wait_for(what: str, cond: Callable[[], object], procs: list[subprocess.Popen[bytes]]) -> None:
    """Until ``cond()`` holds, within :data:`DEADLINE_S`; fails at once if a process exits."""
    process_support.wait_for(what, cond, procs, DEADLINE_S, poll_s=0.5)


def start(args: list[str], cwd: Path, env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as f:
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=f,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def rank_pid(rank: int) -> int | None:
    """The training process of one local rank (its command line names the rank)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            any(a.endswith(b"train_tiny.py") for a in argv)
            and f"--local_rank={rank}".encode() in argv
        ):
            return int(cmdline.parent.name)
    return None


#: DeepSpeed's CPU comm op maps a shared-memory buffer per rank (``shm.cpp``) and never
#: unlinks it: 67 MB of /dev/shm (RAM) per rank and job, for as long as the machine runs.
SHM_BUFFERS = "deepspeed_allreduce_buffer_*"


def release_shm(folder: Path = Path("/dev/shm")) -> list[str]:
    """Unlink DeepSpeed's shared-memory buffers that no running process maps any more.

    A suite runs dozens of two-rank jobs; left alone, their buffers held 9 GB of a 23 GB
    machine's memory after one day. A buffer still mapped belongs to a job that runs.
    """
    found = {p.name: p for p in folder.glob(SHM_BUFFERS)}
    if not found:
        return []
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        mapped.update(name for name in found if name in text)
    freed = sorted(set(found) - mapped)
    for name in freed:
        found[name].unlink(missing_ok=True)
    return freed


def release_stale_build_locks(folder: Path = TORCH_EXTENSIONS) -> list[Path]:
    """Remove the build locks of torch's JIT builds that no running build holds.

    torch's ``FileBaton`` marks a build with a ``lock`` file and every other job waits, polling,
    until it is gone. A job killed while building (a test past its deadline on a busy machine:
    the CPU Adam op takes minutes to compile) leaves the file, and every later job of the suite
    then waits at ``deepspeed.initialize`` until it too is killed. While a compiler runs, the
    lock may be a live build's and is kept.
    """
    locks = list(folder.glob("**/lock"))
    if not locks or _compiler_running():
        return []
    for lock in locks:
        lock.unlink(missing_ok=True)
    return locks


def _compiler_running() -> bool:
    """Whether ninja or a C++ compiler runs on this machine (a JIT build in progress)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:
            continue
        if name in {"ninja", "cc1plus", "c++", "g++", "ld"}:
            return True
    return False
