"""What the probe measures besides the phases: collectives, input time, loss, gradient norm.

In-process, on stand-ins for the engine, for ``deepspeed.comm`` and for torch's tensors (the
probe reads them through their own methods only). Real DeepSpeed runs are in
tests/system/test_e2e_probe_measures.py.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.probe import patch, values
from collectors.probe.clocks import MonotonicClock
from collectors.probe.collectives import GroupSizes, message_bytes, size_bucket
from collectors.probe.recorder import Recorder


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


class Tensor:
    """As much of a torch tensor as the probe touches."""

    def __init__(self, numel: int, itemsize: int = 4, value: float = 0.0, device: str = "cpu"):
        self._numel, self._itemsize, self._value = numel, itemsize, value
        self.device = type("Device", (), {"type": device})()
        self.copied_non_blocking = False

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self._itemsize

    def detach(self) -> Tensor:
        return self

    def item(self) -> float:
        assert self.device.type == "cpu", "item() of a device tensor waits for the device"
        return self._value

    def to(self, device: str, non_blocking: bool = False) -> Tensor:
        assert non_blocking, "a blocking copy waits for the device"
        host = Tensor(self._numel, self._itemsize, self._value)
        host.copied_non_blocking = True
        return host


def test_message_sizes_are_those_nccl_tests_divides_by() -> None:
    t = Tensor(1000, 2)  # 2000 bytes
    assert message_bytes("all_reduce", (t,), {}) == 2000
    assert message_bytes("all_gather_into_tensor", (Tensor(4000, 2), t), {}) == 8000  # output
    assert message_bytes("reduce_scatter_tensor", (Tensor(500, 2), t), {}) == 2000  # input
    assert message_bytes("all_gather", ([t, t, t, t], t), {}) == 8000  # the gathered list
    assert message_bytes("reduce_scatter_fn", (), {"tensor": t, "output_tensor": t}) == 2000
    assert message_bytes("barrier", (), {}) == 0
    assert message_bytes("all_reduce", ("not a tensor",), {}) is None
    assert message_bytes("send", (t,), {}) is None  # not a collective the probe wraps
    assert [size_bucket(n) for n in (0, 1, 4, 5, 132352)] == [0, 1, 4, 4, 131072]


def test_a_groups_size_is_asked_once() -> None:
    asked: list[Any] = []

    def world_size(group: Any) -> int:
        asked.append(group)
        return 8 if group is None else 2

    sizes, dp = GroupSizes(world_size), object()
    assert [sizes.size(None), sizes.size(dp), sizes.size(dp), sizes.size(None)] == [8, 2, 2, 8]
    assert asked == [None, dp]
    assert GroupSizes(lambda g: 1 // 0).size(None) is None  # a failing lookup: unknown


@pytest.fixture
def probe_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv(patch.DIR_ENV, str(tmp_path / "probe"))
    monkeypatch.setenv("RANK", "1")  # as the launcher sets it: the engine is built as rank 1
    monkeypatch.setattr(patch._Probe, "recorder", None)
    monkeypatch.setattr(patch._Probe, "failed", False)
    monkeypatch.setattr(patch._Probe, "groups", GroupSizes(lambda g: 2))
    yield tmp_path / "probe"
    if patch._Probe.recorder is not None:
        patch._Probe.recorder.close()


class Engine:
    """An engine whose backward reduces its gradients, loads data slowly and has a norm."""

    def __init__(self, comm: Any) -> None:
        self.global_steps, self.global_rank, self.device, self.comm = 0, 1, "cpu", comm
        self.norm: Any = Tensor(1, value=0.5)

    def forward(self, x: Any) -> Any:
        return x

    def backward(self, loss: Any) -> Any:
        self.comm.all_reduce(Tensor(33088))  # 132352 bytes of fp32 gradients
        self.comm.all_reduce(Tensor(1), group="dp")  # the norm's 4 bytes
        self.comm.all_gather_into_tensor(Tensor(33088), Tensor(16544), async_op=True)
        return loss

    def step(self) -> None:
        self.global_steps += 1

    def get_global_grad_norm(self) -> Any:
        return self.norm


def fake_comm() -> Any:
    comm = type(sys)("fake_comm")

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> Any:
        time.sleep(0.004)
        return tensor

    def all_gather_into_tensor(out: Any, t: Any, group: Any = None, async_op: bool = False) -> Any:
        return out

    comm.all_reduce, comm.all_gather_into_tensor = all_reduce, all_gather_into_tensor
    patch.patch_collectives(comm)
    return comm


def test_each_step_carries_its_collectives_input_time_loss_and_norm(probe_dir: Path) -> None:
    module = type(sys)("fake_engine")
    module.DeepSpeedEngine = type("DeepSpeedEngine", (Engine,), {})  # type: ignore[attr-defined]
    patch.patch_engine(module)
    engine = module.DeepSpeedEngine(fake_comm())  # type: ignore[attr-defined]
    losses = [2.0, -1.0, 0.5]
    for i, loss in enumerate(losses):
        time.sleep(0.02)  # the data loader's time before the forward
        engine.forward(1.0)
        engine.backward(Tensor(1, value=loss))
        if i == 2:
            engine.norm = float("inf")  # an overflow: the engine's norm is not finite
        engine.step()
    patch._Probe.recorder.close()  # type: ignore[union-attr]
    steps = [r for r in lines(probe_dir / "rank-1.jsonl") if r["kind"] == "rank_step"]
    assert [s["loss"] for s in steps] == losses
    assert [s["grad_norm"] for s in steps] == [0.5, 0.5, None]
    assert steps[0]["input_ms"] is None  # nothing before the first engine call is the loader's
    assert all(20 <= s["input_ms"] < 200 for s in steps[1:])
    by_op = {(c["op"], c["bucket_bytes"]): c for c in steps[1]["collectives"]}
    grads, norm = by_op[("all_reduce", 131072)], by_op[("all_reduce", 4)]
    assert (grads["calls"], grads["msg_bytes"], grads["group_size"]) == (1, 132352, 2)
    assert norm["msg_bytes"] == 4 and 4 <= grads["time_ms"] < 100 and norm["time_ms"] >= 4
    gather = by_op[("all_gather_into_tensor", 131072)]
    assert gather["msg_bytes"] == 132352 and gather["time_ms"] is None  # async: untimed
    # comm_ms is the host time blocked: the two blocking all-reduces
    assert steps[1]["comm_ms"] == pytest.approx(grads["time_ms"] + norm["time_ms"], abs=0.05)


def test_the_collectives_that_build_the_engine_are_no_part_of_step_1(probe_dir: Path) -> None:
    """DeepSpeed's __init__ broadcasts the model's parameters from rank 0: the probe, opened as
    the engine is built, sees those calls, but step 1 is only what the first step called."""

    class Building(Engine):
        def __init__(self, comm: Any) -> None:
            super().__init__(comm)
            comm.all_reduce(Tensor(4096))  # as the parameters' broadcast at start

    module = type(sys)("fake_engine")
    module.DeepSpeedEngine = type("DeepSpeedEngine", (Building,), {})  # type: ignore[attr-defined]
    patch.patch_engine(module)
    engine = module.DeepSpeedEngine(fake_comm())  # type: ignore[attr-defined]
    engine.forward(1.0)
    engine.backward(Tensor(1, value=1.0))
    engine.step()
    patch._Probe.recorder.close()  # type: ignore[union-attr]
    (step,) = [r for r in lines(probe_dir / "rank-1.jsonl") if r["kind"] == "rank_step"]
    calls = sorted((c["op"], c["msg_bytes"]) for c in step["collectives"])
    assert calls == [("all_gather_into_tensor", 132352), ("all_reduce", 4), ("all_reduce", 132352)]


class FakeEvent:
    done = False

    def __init__(self, enable_timing: bool = False) -> None:
        pass

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return FakeEvent.done


class FakeCuda:
    Event = FakeEvent


def test_a_cuda_value_is_copied_without_blocking_and_read_once_the_device_passed_it() -> None:
    FakeEvent.done = False
    pending = values.take(Tensor(1, value=3.25, device="cuda"), FakeCuda)
    assert values.read(pending) is values.NOT_YET
    FakeEvent.done = True
    assert values.read(pending) == 3.25
    assert values.take(Tensor(4, device="cuda"), FakeCuda) is None  # not one number
    assert values.take(Tensor(1, value=1.5), None) == 1.5  # on the CPU: read at once
    assert values.read(values.take(float("nan"))) is None


def test_a_step_line_waits_for_its_loss_on_the_device(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    rec = Recorder(str(path), 0, MonotonicClock(), interval_s=60)
    FakeEvent.done = False
    rec.loss(values.take(Tensor(1, value=0.75, device="cuda"), FakeCuda))
    rec.boundary(1, grad_norm=values.take(Tensor(1, value=2.0, device="cuda"), FakeCuda))
    rec._flush()
    assert not [x for x in lines(path) if x["kind"] == "rank_step"]
    FakeEvent.done = True
    rec._flush()
    (step,) = [x for x in lines(path) if x["kind"] == "rank_step"]
    assert (step["loss"], step["grad_norm"]) == (0.75, 2.0)
    rec.close()


def test_a_call_is_timed_at_the_backend_without_what_deepspeed_comm_adds(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the comms logger on, ``deepspeed.comm`` synchronises and prints around each call."""
    logger = type("CommsLogger", (), {"enabled": True})()
    monkeypatch.setattr(patch._Probe, "comms_logger", logger)

    class Backend:
        def all_reduce(self, tensor: Any, op: Any = None, group: Any = None) -> Any:
            time.sleep(0.005)
            return tensor

    patch.patch_backend(Backend)
    patch.patch_backend(Backend)  # twice is once
    backend, comm = Backend(), type(sys)("fake_comm")

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> Any:
        out = backend.all_reduce(tensor)
        time.sleep(0.05)  # the comms logger's own work: its line printed
        return out

    comm.all_reduce = all_reduce
    patch.patch_collectives(comm)
    rec = patch._recorder(Engine(comm))
    assert rec is not None
    comm.all_reduce(Tensor(256))
    backend.all_reduce(Tensor(256))  # called outside deepspeed.comm: not a measured call
    rec.boundary(1)
    logger.enabled = False  # off: deepspeed.comm adds nothing, its call's time is kept
    comm.all_reduce(Tensor(256))
    rec.boundary(2)
    rec.close()
    first, second = [r for r in lines(probe_dir / "rank-1.jsonl") if r["kind"] == "rank_step"]
    (call,) = first["collectives"]
    assert call["calls"] == 1 and 5 <= call["time_ms"] < 50  # the backend's time only
    assert first["comm_ms"] >= 55  # the host time blocked in deepspeed.comm holds it all
    assert second["collectives"][0]["time_ms"] >= 55
