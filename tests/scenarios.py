"""Real DeepSpeed jobs with one thing wrong on purpose: what a verdict must be judged on.

Each :class:`Scenario` is a 2-rank job of ``tests/e2e/train_tiny.py`` on DeepSpeed's CPU
accelerator (gloo), started through ``dsmon run`` exactly as a user starts one, with a config
and a fault: a slowed rank, a rank that stops (a hang) and is killed later, a SIGKILLed rank,
bf16, fp16 that overflows, DeepSpeed's defaults, a silent two-minute start, an optimizer the
release does not ship. A test runs one live (:func:`start`, then reads the store while it
runs) or judges a recorded one post-mortem: ``python tests/scenarios.py record NAME DEST``
writes the run folder ``dsmon run`` leaves (``train.log``, the probe's files, the config) for
``tests/data``.

DeepSpeed lives in its own virtualenv (``$DSMON_DEEPSPEED_BIN``, see ``deepspeed_support``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepspeed_support import extensions_dir

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TRAIN = TESTS / "e2e" / "train_tiny.py"

#: The config every scenario starts from: ZeRO-1, AdamW, at DeepSpeed's default log level
#: (no ``log_level``): the level most users run at.
BASE: dict[str, Any] = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 4,
    "steps_per_print": 10,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "zero_optimization": {"stage": 1},
}


@dataclass(frozen=True)
class Scenario:
    """One job: its config, the training script's arguments, and how it ends.

    ``kill_after_s``: the whole job is killed (SIGKILL to the launcher's process group) this
    many seconds after the probe last heard from ``kill_after_silent_rank``, as a scheduler's
    time limit or a user's Ctrl-C ends a hung job; None lets the job end by itself.
    ``interrupt_at_step``: SIGINT goes to the whole process group (``dsmon run``, the launcher,
    the ranks) once rank 0 printed that step, as Ctrl-C in the job's terminal sends it.
    """

    name: str
    what: str
    config: Mapping[str, Any]
    args: tuple[str, ...]
    kill_after_s: float | None = None
    interrupt_at_step: int | None = None
    kill_after_silent_rank: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    needs_fp16: bool = False


def _with(**changes: Any) -> dict[str, Any]:
    cfg = json.loads(json.dumps(BASE))
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return cfg


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "healthy",
            "nothing wrong: every rank's forward takes 50 ms (paced inside the model, so no time "
            "is spent outside DeepSpeed between steps)",
            BASE,
            ("--steps", "40", "--pace-s", "0.05"),
        ),
        Scenario(
            "slow_rank",
            "rank 1 sleeps 200 ms in every forward; rank 0 waits for it in the all-reduce "
            "(engine timers on: rank 0's bwd_allreduce holds the wait)",
            _with(wall_clock_breakdown=True),
            ("--steps", "40", "--slow-rank", "1", "--slow-s", "0.2"),
        ),
        Scenario(
            "slow_data",
            "rank 1's data loader takes 150 ms per batch; its engine phases are as fast as rank 0's",
            BASE,
            ("--steps", "30", "--slow-data-rank", "1", "--slow-data-s", "0.15"),
        ),
        Scenario(
            "monitored",
            "the comms logger (verbose) and csv_monitor on, at log_level info",
            _with(
                log_level="info",
                comms_logger={"enabled": True, "verbose": True, "prof_all": True},
                csv_monitor={"enabled": True, "output_path": "monitor/", "job_name": "tiny"},
            ),
            ("--steps", "30", "--pace-s", "0.02"),
        ),
        Scenario(
            "hang_then_kill",
            "rank 1 stops after step 20 (SIGSTOP); the job is killed 45 s after its last beat",
            BASE,
            ("--steps", "400", "--pace-s", "0.05", "--stop-rank", "1", "--stop-step", "20"),
            kill_after_s=45.0,
        ),
        Scenario(
            "sigkill_rank",
            "rank 1 is SIGKILLed after step 12; rank 0 fails on the broken connection",
            BASE,
            ("--steps", "40", "--pace-s", "0.05", "--die-rank", "1", "--die-step", "12"),
        ),
        Scenario(
            "ctrl_c",
            "Ctrl-C after step 15: SIGINT to dsmon run, the launcher and the ranks at once",
            BASE,
            ("--steps", "400", "--pace-s", "0.05"),
            interrupt_at_step=15,
        ),
        Scenario(
            "bf16",
            "bf16 with ZeRO-1",
            _with(bf16={"enabled": True}),
            ("--steps", "30", "--pace-s", "0.05"),
        ),
        Scenario(
            "fp16_overflow",
            "fp16 whose loss is 1e4 times too large: the scaler skips steps and lowers its scale",
            _with(fp16={"enabled": True, "initial_scale_power": 24}),
            ("--steps", "40", "--pace-s", "0.05", "--loss-factor", "10000"),
            needs_fp16=True,
        ),
        Scenario(
            "defaults",
            "DeepSpeed's defaults: only the batch size set, the script's own AdamW",
            {"train_batch_size": 8},
            ("--steps", "30", "--pace-s", "0.05", "--client-optimizer"),
        ),
        Scenario(
            "silent_start",
            "every rank waits 120 s, silently, between initialize and its first step",
            BASE,
            ("--steps", "20", "--pace-s", "0.05", "--start-delay", "120"),
        ),
        Scenario(
            "missing_optimizer",
            "an optimizer DeepSpeed 0.19 no longer ships (OneBitAdam): initialize fails",
            _with(optimizer={"type": "OneBitAdam", "params": {"lr": 0.001}}),
            (
                "--steps",
                "20",
            ),
        ),
    )
}


def deepspeed_bin() -> Path | None:
    """The bin folder of the training virtualenv, or None when there is no DeepSpeed."""
    found = os.environ.get("DSMON_DEEPSPEED_BIN")
    launcher = Path(found) / "deepspeed" if found else shutil.which("deepspeed")
    return Path(launcher).parent if launcher and Path(launcher).exists() else None


def fp16_on_cpu(ds_bin: Path) -> bool:
    """Whether DeepSpeed's CPU accelerator takes fp16 here (it needs AVX512-FP16 or AMX)."""
    probe = "import torch; print(torch.ops.mkldnn._is_mkldnn_fp16_supported())"
    out = subprocess.run(
        [str(ds_bin / "python"), "-c", probe], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() == "True"


def free_port() -> int:
    """A TCP port nothing listens on now (for the job's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    scenario: Scenario,
    folder: Path,
    store: Path,
    ds_bin: Path,
    *,
    run: str | None = None,
    home: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start the job through ``dsmon run --no-dashboard`` into ``folder``; output in run.out.

    The run is named after ``folder`` unless ``run`` names it. Nothing is waited for.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ds_config.json").write_text(json.dumps(scenario.config, indent=2) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    # DeepSpeed builds its CPU ops on a first run (minutes on two cores): every job of one
    # DeepSpeed environment shares one build, wherever its HOME points.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir(ds_bin)))
    env.update(scenario.env)
    env["PATH"] = f"{ds_bin}{os.pathsep}{env.get('PATH', '')}"
    if home is not None:
        env["HOME"] = str(home)
    cmd = [
        sys.executable, "-m", "cli.main", "run", "--dir", str(folder), "--no-dashboard",
        "--store", str(store), "--nvml-interval", "0", "--poll-interval", "0.2",
        *(["--run", run] if run else []), "--",
        "deepspeed", "--num_gpus", "2", "--master_port", str(free_port()), str(TRAIN),
        "--deepspeed_config", "ds_config.json", *scenario.args,
    ]  # fmt: skip
    out = (folder.parent / f"{folder.name}.run.out").open("wb")
    return subprocess.Popen(
        cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def last_beat_age_s(folder: Path, rank: int) -> float | None:
    """Seconds since rank ``rank``'s probe file last grew (None before it exists)."""
    probe = folder / "probe"
    files = list(probe.glob(f"rank-{rank}*.jsonl")) if probe.is_dir() else []
    if not files:
        return None
    return time.time() - max(f.stat().st_mtime for f in files)


def printed_step(folder: Path) -> int:
    """The last ``[train_tiny] step N`` rank 0 printed in the job's log (0 before any)."""
    log = folder / "train.log"
    steps = (
        re.findall(r"\[train_tiny\] step (\d+)", log.read_text(errors="replace"))
        if log.exists()
        else []
    )
    return int(steps[-1]) if steps else 0


def finish(scenario: Scenario, proc: subprocess.Popen[bytes], folder: Path, limit_s: float) -> int:
    """Wait for the job's end, killing it as the scenario says; returns its exit status."""
    deadline = time.monotonic() + limit_s
    interrupt = scenario.interrupt_at_step
    while proc.poll() is None and time.monotonic() < deadline:
        age = last_beat_age_s(folder, scenario.kill_after_silent_rank)
        if scenario.kill_after_s is not None and age is not None and age >= scenario.kill_after_s:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        if interrupt is not None and printed_step(folder) >= interrupt:
            os.killpg(proc.pid, signal.SIGINT)
            interrupt = None  # once: the job then ends by itself
        time.sleep(0.5)
    if proc.poll() is None and time.monotonic() >= deadline:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def record(name: str, dest: Path, limit_s: float = 900.0) -> int:
    """Run one scenario into ``dest`` (a run folder for tests/data) and write its README."""
    ds_bin = deepspeed_bin()
    if ds_bin is None:
        print("scenarios: no DeepSpeed: set $DSMON_DEEPSPEED_BIN", file=sys.stderr)
        return 2
    scenario = SCENARIOS[name]
    shown, dest = dest, dest.resolve()  # the job runs in dest: a relative path would nest
    if scenario.needs_fp16 and not fp16_on_cpu(ds_bin):
        print(f"scenarios: {name} needs fp16, which this CPU lacks", file=sys.stderr)
        return 2
    if dest.exists():
        shutil.rmtree(dest)
    store = dest.parent / f".{dest.name}.sqlite"
    started = time.monotonic()
    proc = start(scenario, dest, store, ds_bin, run=dest.name)
    code = finish(scenario, proc, dest, limit_s)
    took = time.monotonic() - started
    for extra in (
        store,
        store.with_name(store.name + "-wal"),
        store.with_name(store.name + "-shm"),
        dest.parent / f"{dest.name}.run.out",  # the job's output, which train.log holds too
    ):
        extra.unlink(missing_ok=True)
    versions = subprocess.run(
        [str(ds_bin / "python"), "-c", "import deepspeed, torch; "
         "print(f'DeepSpeed {deepspeed.__version__}, torch {torch.__version__}')"],
        capture_output=True, text=True, check=False,
    ).stdout.strip().splitlines()  # fmt: skip
    (dest / "README.md").write_text(
        f"# {dest.name}\n\nA real 2-rank job of `tests/e2e/train_tiny.py` on DeepSpeed's CPU "
        f"accelerator ({versions[-1] if versions else 'DeepSpeed'}), started through "
        f"`dsmon run`: {scenario.what}.\nRecorded with `python tests/scenarios.py record {name} "
        f"{shown}`; the job exited with status {code} after {took:.0f} s.\n\n"
        f"Arguments: `{' '.join(scenario.args)}`; config: `ds_config.json`.\n"
    )
    print(f"{name}: exit {code} after {took:.0f} s -> {dest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``record NAME DEST``, or ``list``."""
    ap = argparse.ArgumentParser(description="Real DeepSpeed jobs with one fault each.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("record")
    r.add_argument("name", choices=sorted(SCENARIOS))
    r.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for s in SCENARIOS.values():
            print(f"{s.name:18} {s.what}")
        return 0
    return record(args.name, args.dest)


if __name__ == "__main__":
    sys.exit(main())
