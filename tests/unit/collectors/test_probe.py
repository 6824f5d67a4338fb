"""The per-rank probe inside a training process: timing, heartbeats, wrapping, loading.

The probe runs in the user's training environment, so these tests drive it the way a job
does: in-process on a stand-in engine (``tests/e2e/fake_deepspeed``, the methods the probe
wraps and nothing else), and in a child Python started with the boot folder on PYTHONPATH.
Real DeepSpeed runs are in test_e2e_ranks.py.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from locations import ROOT

from collectors.job import BOOT_DIR, probe_env
from collectors.probe import patch
from collectors.probe.clocks import CudaEventClock, MonotonicClock
from collectors.probe.recorder import MAX_ERROR_CHARS, Recorder, uncaught_error

FAKE_DS = ROOT / "tests" / "e2e" / "fake_deepspeed"
TRAIN_FAKE = ROOT / "tests" / "e2e" / "train_fake.py"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


class FakeEvent:
    """A CUDA event whose device time and completion the test controls."""

    done = False

    def __init__(self, enable_timing: bool) -> None:
        assert enable_timing
        self.t = 0.0

    def record(self) -> None:
        self.t = FakeCuda.now

    def query(self) -> bool:
        return FakeEvent.done

    def elapsed_time(self, end: FakeEvent) -> float:
        assert FakeEvent.done, "elapsed_time before the device got there would block"
        return end.t - self.t


class FakeCuda:
    now = 0.0
    Event = FakeEvent


def test_recorder_writes_a_step_line_and_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "rank-2.jsonl"
    rec = Recorder(str(path), 2, MonotonicClock(), interval_s=60)
    rec.start()
    rec.enter("forward")
    rec.timed("forward", 4.0)
    rec.timed("forward", 6.0)
    rec.enter("backward", "all_reduce")
    rec.comm(3.0)
    rec.timed("backward", 5.0)
    rec.timed("step", 1.0)
    rec.boundary(1)
    rec.close()
    rec.close()  # atexit may call it again
    first, step, last = lines(path)
    assert first["kind"] == "heartbeat" and first["phase"] == "start" and first["rank"] == 2
    assert step["kind"] == "rank_step" and step["step"] == 1 and step["rank"] == 2
    assert (step["fwd_ms"], step["bwd_ms"], step["step_ms"], step["comm_ms"]) == (10, 5, 1, 3)
    assert step["micro_steps"] == 2 and step["clock"] == "cpu" and step["total_ms"] >= 0
    assert last["phase"] == "exited" and last["step"] == 2 and last["pid"] == os.getpid()


def test_cuda_times_wait_for_the_device_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    clock = CudaEventClock(FakeCuda)
    rec = Recorder(str(path), 0, clock, interval_s=60)
    FakeEvent.done = False
    token = clock.start()
    FakeCuda.now = 7.5
    rec.timed("forward", clock.stop(token))
    rec.boundary(1)
    rec._flush()
    assert [x["kind"] for x in lines(path)] == ["heartbeat"]  # not there yet: no line, no wait
    FakeEvent.done = True
    rec._flush()
    (step,) = [x for x in lines(path) if x["kind"] == "rank_step"]
    assert step["fwd_ms"] == 7.5 and step["clock"] == "cuda" and step["bwd_ms"] is None
    rec.close()


def test_heartbeat_is_kept_alive_while_nothing_changes(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    rec = Recorder(str(path), 0, MonotonicClock(), interval_s=60, keepalive_s=0.05)
    rec.start()
    rec.enter("backward", "all_reduce")
    rec._flush()
    rec._flush()  # unchanged, keepalive not due: nothing
    time.sleep(0.06)
    rec._flush()
    beats = lines(path)
    assert [b["collective"] for b in beats] == [None, "all_reduce", "all_reduce"]
    assert beats[1]["phase_since"] == beats[2]["phase_since"]  # the same wait, still going
    rec.close()


@pytest.fixture
def fresh_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv(patch.DIR_ENV, str(tmp_path / "probe"))
    monkeypatch.setenv("RANK", "3")  # as DeepSpeed's launcher sets it: the engine's rank later
    monkeypatch.setattr(patch._Probe, "recorder", None)
    monkeypatch.setattr(patch._Probe, "failed", False)
    yield tmp_path / "probe"
    if patch._Probe.recorder is not None:
        patch._Probe.recorder.close()


class Engine:
    """A class with the engine's methods, patched in place by the test."""

    def __init__(self, gas: int, rank: int = 3, **attrs: Any) -> None:
        self.global_steps, self.global_rank, self.device, self.gas, self.calls = (
            0,
            rank,
            "cpu",
            gas,
            0,
        )
        self.__dict__.update(attrs)

    def forward(self, x: float) -> float:
        time.sleep(0.002)
        return x

    def backward(self, loss: float) -> float:
        return loss

    def step(self) -> None:
        self.calls += 1
        if self.calls % self.gas == 0:
            self.global_steps += 1


def test_wrapped_engine_times_each_optimizer_step(fresh_probe: Path) -> None:
    module = type(sys)("fake_engine")
    module.DeepSpeedEngine = type("DeepSpeedEngine", (Engine,), {})  # type: ignore[attr-defined]
    patch.patch_engine(module)
    patch.patch_engine(module)  # twice is once
    engine = module.DeepSpeedEngine(gas=2)  # type: ignore[attr-defined]
    for _ in range(6):
        assert engine.forward(1.5) == 1.5
        engine.backward(1.0)
        engine.step()
    assert engine.global_steps == 3
    patch._Probe.recorder.close()  # type: ignore[union-attr]
    recs = lines(fresh_probe / "rank-3.jsonl")
    steps = [r for r in recs if r["kind"] == "rank_step"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["micro_steps"] == 2 and s["fwd_ms"] >= 4.0 for s in steps)
    assert all(s["comm_ms"] is None for s in steps)  # no collective called
    assert not [r for r in recs if r["kind"] == "engine"]  # rank 3: only rank 0 writes it


def test_a_rank_heartbeats_from_initialize_on(fresh_probe: Path) -> None:
    """Building the engine is ``init``, then ``idle`` until its first call: a silent start is seen.

    Neither the build nor the wait after it (data loading, compiling) counts in step 1.
    """
    module = type(sys)("fake_engine")

    class Building(Engine):
        def __init__(self, gas: int) -> None:
            rec = patch._Probe.recorder
            assert rec is not None and rec.state[1] == "init"  # heartbeating already
            rec.comm(500.0)  # a collective while the engine is built (broadcasting parameters)
            super().__init__(gas)

    module.DeepSpeedEngine = Building  # type: ignore[attr-defined]
    patch.patch_engine(module)
    engine = module.DeepSpeedEngine(gas=1)  # type: ignore[attr-defined]
    rec = patch._Probe.recorder
    assert rec is not None and rec.state[1] == "idle"
    rec._flush()
    time.sleep(0.3)  # the script's own loading before its first step
    engine.forward(1.0)
    engine.backward(1.0)
    engine.step()
    rec.close()
    recs = lines(fresh_probe / "rank-3.jsonl")
    phases = [r["phase"] for r in recs if r["kind"] == "heartbeat"]
    assert phases[:2] == ["init", "idle"] and phases[-1] == "exited"
    (step,) = [r for r in recs if r["kind"] == "rank_step"]
    assert step["total_ms"] < 250 and step["comm_ms"] is None


def test_an_engine_that_cannot_be_built_leaves_its_rank_in_init(fresh_probe: Path) -> None:
    module = type(sys)("fake_engine")

    class Refused(Engine):
        def __init__(self, gas: int) -> None:
            raise ValueError("optimizer OneBitAdam is not supported")

    module.DeepSpeedEngine = Refused  # type: ignore[attr-defined]
    patch.patch_engine(module)
    with pytest.raises(ValueError, match="OneBitAdam"):
        module.DeepSpeedEngine(gas=1)  # type: ignore[attr-defined]
    rec = patch._Probe.recorder
    assert rec is not None and rec.state[1] == "init"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


class EngineConfig:
    """Attributes as DeepSpeedConfig keeps them: the user's dict and the resolved values."""

    def __init__(self) -> None:
        self._param_dict = {"steps_per_print": float("inf"), "zero_optimization": {"stage": 2}}
        self.train_batch_size = 16
        self.broken = Unprintable()


def test_rank_0_writes_the_engines_config_once(
    fresh_probe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "0")
    module = type(sys)("fake_engine")
    module.DeepSpeedEngine = type("DeepSpeedEngine", (Engine,), {})  # type: ignore[attr-defined]
    patch.patch_engine(module)
    engine = module.DeepSpeedEngine(  # type: ignore[attr-defined]
        gas=1, rank=0, _config=EngineConfig(), world_size=2
    )
    for _ in range(3):
        engine.forward(1.0)
        engine.backward(1.0)
        engine.step()
    patch._Probe.recorder.close()  # type: ignore[union-attr]
    (line,) = [r for r in lines(fresh_probe / "rank-0.jsonl") if r["kind"] == "engine"]
    # JSON has no inf: the word DeepSpeed's dump prints; an attribute that cannot print is left out
    assert line["config"] == {"steps_per_print": "inf", "zero_optimization": {"stage": 2}}
    assert line["effective"] == {"train_batch_size": "16"}
    assert (line["rank"], line["world_size"], line["device"]) == (0, 2, "cpu")


def test_collective_is_named_and_timed(fresh_probe: Path) -> None:
    comm = type(sys)("fake_comm")
    seen: list[tuple[str, str | None]] = []

    def all_reduce(t: float, async_op: bool = False) -> float:
        rec = patch._Probe.recorder
        assert rec is not None
        seen.append((rec.state[1], rec.state[2]))
        time.sleep(0.01)
        return t

    comm.all_reduce = all_reduce  # type: ignore[attr-defined]
    patch.patch_collectives(comm, ["all_reduce", "missing"])
    rec = patch._recorder(Engine(1))
    assert rec is not None
    rec.enter("backward")
    began = rec.state[3]
    comm.all_reduce(1.0)  # type: ignore[attr-defined]
    comm.all_reduce(1.0, async_op=True)  # type: ignore[attr-defined]
    assert seen == [("backward", "all_reduce")] * 2
    assert rec.state[1:] == ("backward", None, began)  # still the backward that began before
    assert rec._comm_ms is not None and 10 <= rec._comm_ms < 200  # the blocking call only


def run_child(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=60, check=True
    )


def child_env(tmp_path: Path, probe: bool = True) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    base["PYTHONPATH"] = str(FAKE_DS)
    return probe_env(base, tmp_path / "probe") if probe else base


@pytest.mark.slow  # a real process
def test_sitecustomize_loads_the_probe_in_a_fresh_python(tmp_path: Path) -> None:
    out = run_child(child_env(tmp_path), str(TRAIN_FAKE), "4", "2", "0.005")
    assert "trained 4 steps" in out.stdout and out.stderr == ""
    recs = lines(tmp_path / "probe" / "rank-0.jsonl")
    steps = [r for r in recs if r["kind"] == "rank_step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert all(s["comm_ms"] >= 10 for s in steps)  # the stand-in all_reduce sleeps 10 ms
    assert recs[-1]["phase"] == "exited"


@pytest.mark.slow  # a real process
def test_probe_is_off_without_its_folder_variable(tmp_path: Path) -> None:
    env = child_env(tmp_path, probe=False)
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), str(FAKE_DS)])
    code = "import deepspeed.runtime.engine as e; print(hasattr(e.DeepSpeedEngine.forward, '__dsmon_probe__'))"
    assert run_child(env, "-c", code).stdout.strip() == "False"
    assert not (tmp_path / "probe").exists()


@pytest.mark.slow  # a real process
def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 42\n")
    env = child_env(tmp_path)
    env["PYTHONPATH"] += os.pathsep + str(theirs)
    code = (
        "import builtins, deepspeed.runtime.engine as e; "
        "print(builtins.THEIRS, hasattr(e.DeepSpeedEngine.forward, '__dsmon_probe__'))"
    )
    assert run_child(env, "-c", code).stdout.strip() == "42 True"


def test_engine_imported_before_install_is_patched_at_once(fresh_probe: Path) -> None:
    sys.path.insert(0, str(FAKE_DS))
    try:
        import deepspeed.runtime.engine as engine_module

        assert patch.install()
        assert getattr(engine_module.DeepSpeedEngine.forward, "__dsmon_probe__", False)
    finally:
        sys.path.remove(str(FAKE_DS))
        for name in [m for m in sys.modules if m == "deepspeed" or m.startswith("deepspeed.")]:
            del sys.modules[name]


def test_probe_imports_only_the_standard_library() -> None:
    """It runs in the user's environment, which may have no dsmon and no pandas."""
    allowed = set(sys.stdlib_module_names) | {"torch"}
    for path in (ROOT / "collectors" / "probe").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_a_step_whose_times_cannot_be_read_is_dropped_not_retried(tmp_path: Path) -> None:
    class BrokenClock(MonotonicClock):
        def elapsed_ms(self, pending: float) -> float:
            raise RuntimeError("device lost")

    path = tmp_path / "rank-0.jsonl"
    rec = Recorder(str(path), 0, BrokenClock(), interval_s=60)
    rec.timed("forward", 1.0)
    rec.boundary(1)
    rec._flush()
    rec.boundary(2)  # no timed phase: readable
    rec.close()
    assert [x["step"] for x in lines(path) if x["kind"] == "rank_step"] == [2]


def test_the_exception_ending_the_process_is_named_once_and_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What ``close`` reads at exit (a real crash: tests/unit/health/test_probe_failed_ranks.py)."""
    monkeypatch.delattr(sys, "last_exc", raising=False)
    monkeypatch.setattr(sys, "last_value", SystemExit(3), raising=False)
    assert uncaught_error() is None  # sys.exit is no failure the probe can tell
    monkeypatch.setattr(sys, "last_value", RuntimeError("NCCL\n  timeout " + "x" * 400))
    text = uncaught_error()
    assert text is not None and text.startswith("RuntimeError: NCCL timeout xxx")
    assert len(text) == MAX_ERROR_CHARS
