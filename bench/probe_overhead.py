"""Benchmark: what dsmon's per-rank probe costs a training step (goal: <= 1 % of step time).

The probe (``collectors/probe``) sits in every rank's training loop, so its cost is paid on
the step's critical path. It has two parts, measured separately in this process:

- **hot path**: the wrappers around ``DeepSpeedEngine.forward``/``backward``/``step`` and the
  ``deepspeed.comm`` collective run on the training thread. An engine whose methods do
  nothing (one forward, one backward with one blocking ``all_reduce``, one step per
  micro-batch, ``--gas`` micro-batches per optimizer step, as DeepSpeed calls them) runs
  ``--steps`` optimizer steps plain and then with the real wrappers installed (the same
  ``patch_engine`` the import hook calls, with the real recorder writing its file). Each is
  repeated ``--repeats`` times; the difference of the fastest runs, per optimizer step, is the
  hot-path cost: all the time the probe adds, since the engine itself does nothing.
- **writer thread**: the ``dsmon-probe`` thread turns the step lines and heartbeats into JSON
  and writes them once a second. The engine then runs for ``--seconds`` with each step lasting
  ``--step-ms`` (a sleep, which releases the GIL as torch's kernels and collectives do), and
  the thread's own CPU time is read from its POSIX CPU clock.

The overhead of one step is hot path + the writer's CPU per step; the goal is met when that
is <= 1 % of ``--step-ms``. It also prints the shortest step for which the 1 % still holds.
On a GPU the phases are timed with CUDA events, which this CPU benchmark does not exercise:
recording an event is a few microseconds more per phase.

Usage: ``python bench/probe_overhead.py [--steps 20000] [--gas 1] [--repeats 5]
[--seconds 10] [--step-ms 100]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collectors.probe import patch  # noqa: E402 - the repository root is put on sys.path first

GOAL = 0.01


class Engine:
    """The engine's call pattern and nothing else: the methods do no work."""

    def __init__(self, comm: Any, gas: int, step_s: float = 0.0) -> None:
        self.global_steps, self.global_rank, self.device = 0, 0, "cpu"
        self.comm, self.gas, self.step_s, self.micro = comm, gas, step_s, 0

    def forward(self, x: float) -> float:
        return x

    def backward(self, loss: float) -> float:
        if (self.micro + 1) % self.gas == 0:
            self.comm.all_reduce(loss)
        return loss

    def step(self) -> None:
        self.micro += 1
        if self.micro % self.gas == 0:
            if self.step_s:
                time.sleep(self.step_s)
            self.global_steps += 1


def fresh_classes() -> tuple[type[Engine], Any]:
    """An engine class and comm module of their own (patching one leaves the other plain)."""
    comm = types.ModuleType("comm")
    comm.all_reduce = lambda tensor, async_op=False: tensor  # type: ignore[attr-defined]
    return type("DeepSpeedEngine", (Engine,), {}), comm


def run_steps(engine: Engine, steps: int) -> float:
    """Seconds for ``steps`` optimizer steps."""
    t0 = time.perf_counter()
    for _ in range(steps * engine.gas):
        loss = engine.forward(1.0)
        engine.backward(loss)
        engine.step()
    return time.perf_counter() - t0


def probed(gas: int, step_s: float = 0.0) -> Engine:
    """An engine of a new class with the probe's wrappers installed."""
    cls, comm = fresh_classes()
    module = types.ModuleType("engine")
    module.DeepSpeedEngine = cls  # type: ignore[attr-defined]
    patch.patch_engine(module)
    patch.patch_collectives(comm)
    return cls(comm, gas, step_s)


def hot_path_us(steps: int, gas: int, repeats: int) -> tuple[float, float]:
    """(plain, probed) microseconds per optimizer step, fastest of ``repeats`` runs each."""
    plain_cls, plain_comm = fresh_classes()
    plain = min(run_steps(plain_cls(plain_comm, gas), steps) for _ in range(repeats))
    with_probe = min(run_steps(probed(gas), steps) for _ in range(repeats))
    return plain / steps * 1e6, with_probe / steps * 1e6


def new_recorder() -> None:
    """Close the process's recorder, so the next engine call opens a fresh one."""
    if patch._Probe.recorder is not None:
        patch._Probe.recorder.close()
    patch._Probe.recorder = None


def writer_cpu_s(seconds: float, step_ms: float, gas: int) -> tuple[float, int]:
    """CPU seconds of the ``dsmon-probe`` thread while steps of ``step_ms`` run, and steps."""
    new_recorder()  # not the one the hot-path runs filled
    engine = probed(gas, step_ms / 1000.0)
    run_steps(engine, 1)  # opens the recorder and starts its thread
    (thread,) = [t for t in threading.enumerate() if t.name == "dsmon-probe"]
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    cpu0, t_end = time.clock_gettime(clock), time.monotonic() + seconds
    steps = 0
    while time.monotonic() < t_end:
        run_steps(engine, 1)
        steps += 1
    return time.clock_gettime(clock) - cpu0, steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--gas", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--step-ms", type=float, default=100.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsmon-probe-bench-") as tmp:
        os.environ[patch.DIR_ENV] = tmp
        plain, with_probe = hot_path_us(args.steps, args.gas, args.repeats)
        hot = max(with_probe - plain, 0.0)
        print(
            f"probe hot path: {args.steps} optimizer steps of {args.gas} micro-batch(es), "
            f"fastest of {args.repeats}: plain {plain:.2f} us/step, probed {with_probe:.2f} "
            f"us/step -> {hot:.2f} us per optimizer step"
        )
        cpu, steps = writer_cpu_s(args.seconds, args.step_ms, args.gas)
        per_step = cpu / max(steps, 1) * 1e6
        print(
            f"probe writer thread: {cpu:.4f} CPU-s in {args.seconds:g} s for {steps} steps of "
            f"{args.step_ms:g} ms = {cpu / args.seconds * 60:.3f} CPU-s per minute = "
            f"{per_step:.2f} us per step"
        )
        new_recorder()
        lines = sum(len(f.read_text().splitlines()) for f in Path(tmp).glob("*.jsonl"))
    total_us = hot + per_step
    share = total_us / (args.step_ms * 1000.0)
    print(
        f"probe overhead: {total_us:.2f} us per step = {share * 100:.4f} % of a "
        f"{args.step_ms:g} ms step; 1 % holds for steps >= {total_us / GOAL / 1000:.2f} ms "
        f"({lines} lines written)"
    )
    verdict = "met" if share <= GOAL else "NOT met"
    print(f"goal: <= 1 % of step time -> {verdict}")


if __name__ == "__main__":
    main()
