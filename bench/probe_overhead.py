"""Benchmark: what dsmon's per-rank probe costs a training step (goal: <= 1 % of step time).

The probe (``collectors/probe``) sits in every rank's training loop, so its cost is paid on
the step's critical path. It is measured three ways, each against the same engine without
the probe, in alternating rounds (plain, probed, plain, ...), reported as medians:

- **hot path**: the wrappers around ``DeepSpeedEngine.forward``/``backward``/``step``, the
  ``deepspeed.comm`` collectives and DeepSpeed's torch backend, run on the training thread.
  An engine whose methods do nothing but what DeepSpeed's call pattern is (per micro-batch a
  forward, a backward given the loss, which makes ZeRO's three collectives at the boundary,
  through a backend, and a step; the gradient norm read after it) runs ``--steps`` optimizer
  steps, ``--gas`` micro-batches each. Everything the probe reads is read: the loss and the
  norm (``item()``), each collective's message size (``numel()``, ``element_size()``) and
  group. The loss and the collectives' tensors are stand-ins with those methods, or with
  ``--torch`` real CPU tensors (run with a Python that has torch: DeepSpeed's virtualenv).
  Per round: the training thread's CPU time per optimizer step (on a machine shared with
  other work, wall time also holds the waits for a free core); the cost is the median of
  the per-round differences.
- **writer thread**: the ``dsmon-probe`` thread turns the step lines (with their collectives)
  and heartbeats into JSON and writes them once a second. The engine runs for ``--seconds``
  with each step lasting ``--step-ms`` (a sleep, which releases the GIL as torch's kernels and
  collectives do), and the thread's own CPU time is read from its POSIX CPU clock.
- **side by side**: the same engine with steps of ``--step-ms``, ``--side-steps`` steps a
  round, with and without the probe, in wall time: the median step and the mean step of
  each (the mean holds the steps the writer thread's once-a-second write held up). Sleeps
  jitter by tens of microseconds, and on a machine shared with other work a thread that
  does more between its sleeps waits more for a core, so this is the check that nothing the
  probe does waits, not a precise figure.

The overhead of one step is hot path + the writer's CPU per step; the goal is met when that
is <= 1 % of ``--step-ms``. It also prints the shortest step for which the 1 % still holds.
On a GPU the phases and collectives are timed with CUDA events and the loss and norm copied
without blocking, which this CPU benchmark does not exercise: a few microseconds more per
call.

Usage: ``python bench/probe_overhead.py [--steps 20000] [--gas 1] [--rounds 5] [--seconds 10]
[--step-ms 10] [--side-steps 200] [--torch]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collectors.probe import patch  # noqa: E402 - the repository root is put on sys.path first
from collectors.probe.clocks import MonotonicClock  # noqa: E402
from collectors.probe.recorder import Recorder  # noqa: E402

GOAL = 0.01
#: Steps the hot path's recorder holds before they are let go (a second of 10 ms steps).
DRAIN_STEPS = 100
#: ZeRO-1's collectives at a step's boundary in the small model of tests/e2e/train_tiny.py:
#: the gradients' all-reduce (fp32 elements), the norm's, the parameters' all-gather.
GRAD_ELEMENTS = 33088


class Stand:
    """A CPU tensor as far as the probe reads one: size, element size, value."""

    def __init__(self, numel: int, value: float = 1.0) -> None:
        self._numel, self._value = numel, value
        self.device = types.SimpleNamespace(type="cpu")

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return 4

    def detach(self) -> Stand:
        return self

    def item(self) -> float:
        return self._value


def tensors(use_torch: bool) -> dict[str, Any]:
    """The loss, the norm and the collectives' buffers: stand-ins, or real torch tensors."""
    if use_torch:
        import torch

        return {
            "loss": torch.tensor(1.5, requires_grad=True) * 1.0,
            "norm": torch.tensor(0.5),
            "grads": torch.zeros(GRAD_ELEMENTS),
            "scalar": torch.zeros(1),
            "out": torch.zeros(GRAD_ELEMENTS),
            "shard": torch.zeros(GRAD_ELEMENTS // 2),
        }
    return {
        "loss": Stand(1, 1.5),
        "norm": Stand(1, 0.5),
        "grads": Stand(GRAD_ELEMENTS),
        "scalar": Stand(1),
        "out": Stand(GRAD_ELEMENTS),
        "shard": Stand(GRAD_ELEMENTS // 2),
    }


class Backend:
    """DeepSpeed's torch backend as the probe sees it: methods that do the collective."""

    def all_reduce(
        self, tensor: Any, op: Any = None, group: Any = None, async_op: bool = False
    ) -> Any:
        return tensor

    def all_gather_into_tensor(
        self, output_tensor: Any, input_tensor: Any, group: Any = None, async_op: bool = False
    ) -> Any:
        return output_tensor


class Engine:
    """The engine's call pattern and nothing else: the methods do no work."""

    def __init__(self, comm: Any, gas: int, t: dict[str, Any], step_s: float = 0.0) -> None:
        self.global_steps, self.global_rank, self.device = 0, 0, "cpu"
        self.comm, self.gas, self.step_s, self.micro, self.t = comm, gas, step_s, 0, t

    def forward(self, x: float) -> float:
        return x

    def backward(self, loss: Any) -> Any:
        if (self.micro + 1) % self.gas == 0:
            self.comm.all_reduce(self.t["grads"])
            self.comm.all_reduce(self.t["scalar"], group=None)
            self.comm.all_gather_into_tensor(self.t["out"], self.t["shard"])
        return loss

    def step(self) -> None:
        self.micro += 1
        if self.micro % self.gas == 0:
            if self.step_s:
                time.sleep(self.step_s)
            self.global_steps += 1

    def get_global_grad_norm(self) -> Any:
        return self.t["norm"]


def fresh_classes() -> tuple[type[Engine], Any]:
    """An engine class, a comm module and a backend class of their own.

    Patching one set leaves the others plain; the comm functions call the backend, as
    ``deepspeed.comm``'s call ``cdb``.
    """
    methods = {k: v for k, v in vars(Backend).items() if not k.startswith("__")}
    backend_cls = type("TorchBackend", (), methods)  # its own methods, as DeepSpeed's class
    backend = backend_cls()
    comm = types.ModuleType("comm")

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> Any:
        return backend.all_reduce(tensor, op, group, async_op)

    def all_gather_into_tensor(
        output_tensor: Any, tensor: Any, group: Any = None, async_op: bool = False
    ) -> Any:
        return backend.all_gather_into_tensor(output_tensor, tensor, group, async_op)

    comm.all_reduce = all_reduce  # type: ignore[attr-defined]
    comm.all_gather_into_tensor = all_gather_into_tensor  # type: ignore[attr-defined]
    comm.backend_cls = backend_cls  # type: ignore[attr-defined]
    return type("DeepSpeedEngine", (Engine,), {}), comm


def run_steps(engine: Engine, steps: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds for ``steps`` optimizer steps on ``clock`` (wall time by default)."""
    loss = engine.t["loss"]
    t0 = clock()
    for _ in range(steps * engine.gas):
        engine.forward(1.0)
        engine.backward(loss)
        engine.step()
    return clock() - t0


def probed(gas: int, t: dict[str, Any], step_s: float = 0.0) -> Engine:
    """An engine of a new class with the probe's wrappers installed (backend included)."""
    cls, comm = fresh_classes()
    module = types.ModuleType("engine")
    module.DeepSpeedEngine = cls  # type: ignore[attr-defined]
    patch.patch_engine(module)
    patch.patch_collectives(comm)
    patch.patch_backend(comm.backend_cls)
    return cls(comm, gas, t, step_s)


def plain(gas: int, t: dict[str, Any], step_s: float = 0.0) -> Engine:
    """The same engine without the probe."""
    cls, comm = fresh_classes()
    return cls(comm, gas, t, step_s)


def alternate(rounds: int, measure: Callable[[bool], float]) -> tuple[list[float], list[float]]:
    """``measure(probed)`` in alternating rounds: plain, probed, plain, ..."""
    out: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for with_probe in (False, True):
            out[with_probe].append(measure(with_probe))
    return out


def hot_path_us(steps: int, gas: int, rounds: int, t: dict[str, Any]) -> tuple[float, float, float]:
    """(plain, probed, their difference): medians over the rounds, us per optimizer step.

    Times are the training thread's CPU time: on a machine shared with other work, wall time
    also holds the waits for a free core, which the probe does not cause.

    The recorder's writer thread is held off while the rounds run (its interval is an hour):
    at tens of thousands of steps a second, far from any real run, turning their lines into
    JSON would take the GIL from the loop being timed. Its cost per step is measured apart,
    at the step time asked for (:func:`writer_cpu_s`). The steps it would have taken are
    let go every :data:`DRAIN_STEPS`, untimed, as it does once a second: held, hundreds of
    thousands of them would make every garbage collection of the loop slower.
    """
    new_recorder()
    folder = os.environ[patch.DIR_ENV]
    held = Recorder(os.path.join(folder, "rank-0.jsonl"), 0, MonotonicClock(), interval_s=3600)
    held.start()
    patch._Probe.recorder = held

    def measure(with_probe: bool) -> float:
        engine = probed(gas, t) if with_probe else plain(gas, t)
        spent = 0.0
        for start in range(0, steps, DRAIN_STEPS):  # what the writer takes each second
            spent += run_steps(engine, min(DRAIN_STEPS, steps - start), time.thread_time)
            held._queue.clear()
        return spent / steps * 1e6

    try:
        base, probe = alternate(rounds, measure)
    finally:
        new_recorder()
    diffs = [p - b for b, p in zip(base, probe, strict=True)]
    return statistics.median(base), statistics.median(probe), statistics.median(diffs)


def new_recorder() -> None:
    """Close the process's recorder, so the next engine call opens a fresh one.

    Its writer thread is let finish what it is writing first: a backlog written past the
    close's wait would leave two writer threads running.
    """
    rec = patch._Probe.recorder
    if rec is not None:
        rec.close()
        rec._thread.join()
    patch._Probe.recorder = None


def writer_cpu_s(seconds: float, step_ms: float, gas: int, t: dict[str, Any]) -> tuple[float, int]:
    """CPU seconds of the ``dsmon-probe`` thread while steps of ``step_ms`` run, and steps."""
    new_recorder()  # not the one the hot-path runs filled
    engine = probed(gas, t, step_ms / 1000.0)
    run_steps(engine, 1)  # opens the recorder and starts its thread
    (thread,) = [x for x in threading.enumerate() if x.name == "dsmon-probe"]
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    cpu0, t_end = time.clock_gettime(clock), time.monotonic() + seconds
    steps = 0
    while time.monotonic() < t_end:
        run_steps(engine, 1)
        steps += 1
    return time.clock_gettime(clock) - cpu0, steps


def step_times_ms(engine: Engine, steps: int) -> list[float]:
    """Each of ``steps`` optimizer steps' wall time (ms)."""
    loss, out = engine.t["loss"], []
    for _ in range(steps):
        t0 = time.perf_counter()
        for _ in range(engine.gas):
            engine.forward(1.0)
            engine.backward(loss)
            engine.step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def side_by_side_ms(
    steps: int, step_ms: float, gas: int, rounds: int, t: dict[str, Any]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((median, mean) step time without, (median, mean) with the probe), in ms.

    Per round, the median and the mean of its steps; over the rounds, the median of each.
    The mean holds the steps the writer thread's once-a-second write held up.
    """
    per: dict[bool, list[list[float]]] = {False: [], True: []}

    def measure(with_probe: bool) -> float:
        engine = (probed if with_probe else plain)(gas, t, step_ms / 1000.0)
        per[with_probe].append(step_times_ms(engine, steps))
        return 0.0

    alternate(rounds, measure)

    def figures(runs: list[list[float]]) -> tuple[float, float]:
        return (
            statistics.median(statistics.median(r) for r in runs),
            statistics.median(statistics.fmean(r) for r in runs),
        )

    return figures(per[False]), figures(per[True])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--gas", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--side-steps", type=int, default=200)
    p.add_argument("--torch", action="store_true", help="real torch CPU tensors")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    t = tensors(args.torch)
    kind = "torch CPU tensors" if args.torch else "stand-in tensors"
    with tempfile.TemporaryDirectory(prefix="dsmon-probe-bench-") as tmp:
        os.environ[patch.DIR_ENV] = tmp
        base, with_probe, hot = hot_path_us(args.steps, args.gas, args.rounds, t)
        hot = max(hot, 0.0)
        print(
            f"probe hot path: {args.steps} optimizer steps of {args.gas} micro-batch(es), 3 "
            f"collectives each, {kind}, thread CPU time, median of {args.rounds} alternating rounds: plain "
            f"{base:.2f} us/step, probed {with_probe:.2f} us/step -> {hot:.2f} us per "
            "optimizer step"
        )
        cpu, steps = writer_cpu_s(args.seconds, args.step_ms, args.gas, t)
        per_step = cpu / max(steps, 1) * 1e6
        print(
            f"probe writer thread: {cpu:.4f} CPU-s in {args.seconds:g} s for {steps} steps of "
            f"{args.step_ms:g} ms = {cpu / args.seconds * 60:.3f} CPU-s per minute = "
            f"{per_step:.2f} us per step"
        )
        new_recorder()
        (plain_med, plain_mean), (probed_med, probed_mean) = side_by_side_ms(
            args.side_steps, args.step_ms, args.gas, args.rounds, t
        )
        print(
            f"side by side: {args.side_steps} steps of {args.step_ms:g} ms, median of "
            f"{args.rounds} alternating rounds: median step plain {plain_med:.4f} ms, probed "
            f"{probed_med:.4f} ms ({(probed_med / plain_med - 1) * 100:+.3f} %); mean step "
            f"plain {plain_mean:.4f} ms, probed {probed_mean:.4f} ms "
            f"({(probed_mean / plain_mean - 1) * 100:+.3f} %)"
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
