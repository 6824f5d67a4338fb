"""``dsmon run -- COMMAND``: the job starts with the probe, its output and the probe's files
are collected into the store, and the command exits with the job's status.

The job here is a training loop on the stand-in engine (``tests/e2e/fake_deepspeed``), so the
whole path (environment, sitecustomize, import hook, per-rank file, tailer, ingest, store)
runs in a few seconds; test_e2e_ranks.py does the same with real DeepSpeed.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from locations import ROOT
from process_support import free_port

from collectors.job import BOOT_DIR, PROBE_DIR_ENV, copy_probe, probe_env
from dsmon.ds_config.find import config_in
from dsmon.store.store import open_store

FAKE_DS = ROOT / "tests" / "e2e" / "fake_deepspeed"
TRAIN_FAKE = ROOT / "tests" / "e2e" / "train_fake.py"


def dsmon_run(tmp_path: Path, *job: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(FAKE_DS))
    args = ["--dir", str(tmp_path / "job1"), "--no-dashboard", "--nvml-interval", "0"]
    args += ["--store", str(tmp_path / "s.sqlite"), "--poll-interval", "0.1"]
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "run", *args, "--", *job],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.slow  # starts a dsmon process
def test_job_is_probed_and_collected(tmp_path: Path) -> None:
    out = dsmon_run(tmp_path, sys.executable, str(TRAIN_FAKE), "6", "1", "0.002")
    assert out.returncode == 0, out.stderr
    assert "trained 6 steps" in out.stdout  # the job's output is shown as usual
    log = (tmp_path / "job1" / "train.log").read_text().splitlines()
    assert "trained 6 steps" in log
    # dsmon's own first line, which marks where the job's output begins for the step clock
    assert re.fullmatch(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \[INFO\] \[dsmon:0:run\] dsmon run "
        rf"starts the job: {re.escape(sys.executable)} \S+train_fake\.py 6 1 0\.002",
        log[0],
    )
    # and its last: the job's exit status, which ends the run under any launcher
    assert log[-1].endswith("[INFO] [dsmon:0:run] dsmon run: the job ended with status 0")
    store = open_store(tmp_path / "s.sqlite")
    try:
        (info,) = store.runs()
        assert info.name == "job1"
        (end,) = [e for e in store.records("job1", "event") if e.name == "job_end"]  # type: ignore[attr-defined]
        assert end.detail == {"return_code": 0}  # type: ignore[attr-defined]
        steps = store.frames.frame("job1", "rank_step")
        assert sorted(steps["step"]) == [1, 2, 3, 4, 5, 6]
        assert set(steps["rank"]) == {0} and set(steps["file"]) == {"rank-0.jsonl"}
        beats = store.frames.frame("job1", "heartbeat")
        assert beats.sort_values("line")["phase"].iloc[-1] == "exited"
    finally:
        store.close()


@pytest.mark.slow  # a real process
def test_the_jobs_deepspeed_config_is_read_for_the_checklist(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "wall_clock_breakdown": true}')
    script = "import sys; print('--deepspeed_config given:', sys.argv[-1])"
    out = dsmon_run(tmp_path, sys.executable, "-c", script, "--deepspeed_config", "ds.json")
    assert out.returncode == 0, out.stderr
    store = open_store(tmp_path / "s.sqlite")
    try:
        (cfg,) = store.records("job1", "config")
        assert cfg.config == {"train_batch_size": 8, "wall_clock_breakdown": True}  # type: ignore[attr-defined]
        assert cfg.origin == "file"  # type: ignore[attr-defined]
    finally:
        store.close()


@pytest.mark.parametrize(
    "options",
    [
        ["--deepspeed", "--deepspeed_config", "ds.json"],  # DeepSpeed's flag, then its file
        ["--deepspeed", "ds.json"],  # the Hugging Face Trainer's option
        ["--deepspeed=ds.json"],
    ],
)
def test_the_config_a_trainer_job_is_given_is_found(options: list[str]) -> None:
    assert config_in(["deepspeed", "--num_gpus", "2", "train.py", *options]) == "ds.json"


def test_deepspeeds_flag_alone_names_no_config() -> None:
    assert config_in(["deepspeed", "train.py", "--deepspeed", "data.txt"]) is None


@pytest.mark.slow  # starts a dsmon process
def test_exit_status_is_the_jobs(tmp_path: Path) -> None:
    out = dsmon_run(tmp_path, sys.executable, "-c", "import sys; print('bye'); sys.exit(3)")
    assert out.returncode == 3 and "bye" in out.stdout


@pytest.mark.slow  # starts a dsmon process
def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    out = dsmon_run(tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().endswith(
        "dsmon: run: no command: dsmon run [options] -- deepspeed train.py ..."
    )


@pytest.mark.slow  # a real process
def test_a_command_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    out = dsmon_run(tmp_path, str(tmp_path / "no-such-launcher"))
    assert out.returncode == 1
    assert "dsmon: run: cannot start" in out.stderr and "Traceback" not in out.stderr


def test_probe_env_puts_the_boot_folder_first_and_keeps_the_rest(tmp_path: Path) -> None:
    env = probe_env({"PYTHONPATH": "/theirs", "X": "1"}, tmp_path / "p")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(BOOT_DIR), "/theirs"]
    assert env[PROBE_DIR_ENV] == str(tmp_path / "p") and env["X"] == "1"
    assert probe_env({}, tmp_path)["PYTHONPATH"] == str(BOOT_DIR)
    assert (BOOT_DIR / "sitecustomize.py").is_file()


@pytest.mark.slow  # a real process
def test_probe_copy_runs_without_dsmon_installed(tmp_path: Path) -> None:
    """``dsmon probe DIR`` (a Kubernetes init container): the copy alone turns the probe on."""
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "probe", str(tmp_path / "code"), "--probe-dir", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    env_lines = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert env_lines == {
        "PYTHONPATH": str(tmp_path / "code" / "boot"),
        PROBE_DIR_ENV: str(tmp_path / "p"),
    }
    # The base Python, outside this virtualenv: dsmon is not installed there, only the copy.
    env = {"PYTHONPATH": os.pathsep.join([env_lines["PYTHONPATH"], str(FAKE_DS)])}
    env[PROBE_DIR_ENV] = env_lines[PROBE_DIR_ENV]
    base = [sys._base_executable, "-s"]
    no_dsmon = subprocess.run(
        [*base, "-c", "import dsmon"], env=env, cwd=tmp_path, capture_output=True
    )
    assert no_dsmon.returncode == 1
    subprocess.run(
        [*base, str(TRAIN_FAKE), "3", "1", "0"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert '"step":3' in (tmp_path / "p" / "rank-0.jsonl").read_text()


def test_probe_copy_leaves_the_folder_it_is_given_alone(tmp_path: Path) -> None:
    """A Kubernetes emptyDir is root's, mode 0777: the init container (uid 10001) may write in
    it but not change its mode or times, which a tree copy's copystat does (EPERM)."""
    dest = tmp_path / "volume"
    dest.mkdir()
    dest.chmod(0o777)
    assert copy_probe(dest) == dest / "boot"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o777
    assert (dest / "boot" / "sitecustomize.py").read_bytes() == (
        BOOT_DIR / "sitecustomize.py"
    ).read_bytes()
    assert not list(dest.rglob("__pycache__"))
    copy_probe(dest)  # again, over the first copy (a restarted init container)


@pytest.mark.slow
def test_dashboard_stays_up_after_the_job_until_ctrl_c(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(FAKE_DS))
    port = free_port()
    args = ["--dir", str(tmp_path / "job1"), "--store", str(tmp_path / "s.sqlite"), "--port",
            str(port), "--no-browser", "--nvml-interval", "0"]  # fmt: skip
    err = tmp_path / "err.txt"
    with err.open("wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "run", *args, "--", sys.executable,
             str(TRAIN_FAKE), "3", "1", "0"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=f,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "stays up until Ctrl-C" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.5)
        assert "the job ended with status 0" in err.read_text()
        # Said once the dashboard answers, which a short job can end before.
        assert f"the dashboard at http://127.0.0.1:{port} stays up" in err.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as r:
            assert r.read() == b"ok"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
