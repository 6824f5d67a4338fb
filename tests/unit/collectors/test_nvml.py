"""The NVML poller against FakeNvml scenarios (and the real NVML where a GPU is present)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
from fakes import (
    FakeNvml,
    eight_gpus_two_models,
    field_not_supported,
    gpu_lost_mid_run,
    no_driver,
)

from collectors.gpu.nvml import NvmlPoller
from dsmon.model.records import GpuSampleRecord, record_key
from dsmon.model.wire import decode, encode


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 14, 10, 22, 818000)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def poller(nvml: FakeNvml) -> NvmlPoller:
    p = NvmlPoller(nvml, run="z2", node="worker-1", now=Clock())
    assert p.start()
    return p


def test_eight_gpus_of_two_models() -> None:
    p = poller(eight_gpus_two_models())
    first = p.poll()
    second = p.poll()
    assert [s.gpu_index for s in second] == list(range(8))
    assert {s.ts for s in first} == {"2026-11-29T14:10:23.818"}
    assert {s.ts for s in second} == {"2026-11-29T14:10:24.818"}
    h100 = second[0]
    assert h100 == GpuSampleRecord(
        src=h100.src,
        ts="2026-11-29T14:10:24.818",
        gpu_index=0,
        uuid="GPU-h100-0000",
        name="NVIDIA H100 80GB HBM3",
        util_gpu_pct=87.0,
        util_mem_pct=41.0,
        mem_used_bytes=61_234_567_168,
        mem_total_bytes=85_520_809_984,
        power_w=612.345,
        power_limit_w=700.0,
        energy_j=124_656.789,  # 123,456,789 mJ + 2 polls x 600,000 mJ
        temperature_c=64.0,
        sm_clock_mhz=1980.0,
        mem_clock_mhz=2619.0,
        throttle_reasons=0x4,
        pcie_tx_bytes_per_s=2048 * 1024.0,
        pcie_rx_bytes_per_s=4096 * 1024.0,
        ecc_corrected=3,
        ecc_uncorrected=0,
        gpm_sm_active_pct=71.5,
        gpm_tensor_active_pct=43.25,
        gpm_dram_bw_pct=55.0,
        xid=None,
    )
    assert (h100.src.run, h100.src.node, h100.src.file, h100.src.rank) == (
        "z2",
        "worker-1",
        None,
        None,
    )
    # GPM needs two samples: nothing on the first poll.
    assert first[0].gpm_sm_active_pct is None and first[0].util_gpu_pct == 87.0
    a100 = second[7]
    assert (a100.name, a100.uuid) == ("NVIDIA A100-SXM4-40GB", "GPU-a100-0007")
    # Memory info v2 is missing from this "driver": v1 answers instead.
    assert (a100.mem_used_bytes, a100.mem_total_bytes) == (1_073_741_824, 42_949_672_960)
    assert (a100.gpm_sm_active_pct, a100.gpm_tensor_active_pct, a100.gpm_dram_bw_pct) == (
        None,
        None,
        None,
    )
    assert (a100.power_w, a100.throttle_reasons, a100.sm_clock_mhz) == (95.0, 0x1, 210.0)
    assert len({record_key(s) for s in first + second}) == 16


def test_unsupported_field_is_null_for_that_field_only_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="collectors.gpu.nvml")
    p = poller(field_not_supported())
    samples = [p.poll()[0] for _ in range(3)]
    rtx = samples[-1]
    assert (rtx.ecc_corrected, rtx.ecc_uncorrected, rtx.power_w) == (None, None, None)
    # Clock-event reasons are missing from the driver: the older throttle-reasons call answers.
    assert rtx.throttle_reasons == 0x4
    assert (rtx.util_gpu_pct, rtx.power_limit_w, rtx.temperature_c) == (12.0, 400.0, 35.0)
    messages = [r.getMessage() for r in caplog.records]
    assert (
        messages.count(
            "dsmon: GPU 0 (NVIDIA GeForce RTX 3090): ecc_corrected unavailable (Not Supported); "
            "reported as null"
        )
        == 1
    )
    assert sum("power_w unavailable (Insufficient Permissions)" in m for m in messages) == 1
    assert not any("throttle_reasons" in m for m in messages)


def _traceback_depth(exc: BaseException) -> int:
    depth, tb = 0, exc.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    return depth


def test_a_stored_error_answer_is_raised_fresh_each_time() -> None:
    """As real pynvml: a new NVMLError per failed call, its traceback only that call's frames.

    Re-raising one stored instance prepends the raising frames to its old traceback at every
    raise, so a long-lived collector polling an unsupported field grew by a frame a call and
    kept every earlier poll's frames alive (the soak benchmark measured it as a leak).
    """
    nvml = field_not_supported()  # GPU 0's power reading answers NVML_ERROR_NO_PERMISSION
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    raised: list[BaseException] = []
    for _ in range(10_000):
        try:
            nvml.nvmlDeviceGetPowerUsage(handle)
        except nvml.NVMLError as e:
            raised = [*raised[:1], e]  # the first and the latest
    first, last = raised
    assert _traceback_depth(last) == _traceback_depth(first) <= 3
    assert last is not first
    assert isinstance(last, nvml.NVMLError) and last.value == 4 and str(last) == str(first)


def test_gpu_lost_mid_run_keeps_the_others(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="collectors.gpu.nvml")
    p = poller(gpu_lost_mid_run(at_poll=3))
    polls = [p.poll() for _ in range(5)]
    assert [s[1].util_gpu_pct for s in polls] == [87.0, 87.0, None, None, None]
    assert [s[0].util_gpu_pct for s in polls] == [87.0] * 5
    lost = polls[4][1]
    assert (lost.gpu_index, lost.uuid, lost.name) == (1, "GPU-h100-0001", "NVIDIA H100 80GB HBM3")
    assert lost.mem_used_bytes is None and lost.gpm_sm_active_pct is None
    assert polls[4][0].gpm_sm_active_pct == 71.5
    assert [r.getMessage() for r in caplog.records] == [
        "dsmon: GPU 1 (NVIDIA H100 80GB HBM3, GPU-h100-0001) is lost (GPU is lost): "
        "reported without figures from now on"
    ]


def test_no_driver_is_one_clear_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collectors.gpu.nvml")
    p = NvmlPoller(no_driver(), run="z2")
    assert p.start() is False
    assert p.poll() == []
    p.close()
    assert [r.getMessage() for r in caplog.records] == [
        "dsmon: NVML unavailable (Driver Not Loaded): no GPU samples; log collection goes on"
    ]


def test_xid_event_is_reported_on_its_gpu_once() -> None:
    nvml = eight_gpus_two_models()
    p = poller(nvml)
    p.poll()
    nvml.xids.append((5, 79))
    with_xid = p.poll()
    after = p.poll()
    assert [s.xid for s in with_xid] == [None] * 5 + [79] + [None] * 2
    assert [s.xid for s in after] == [None] * 8


def test_close_releases_nvml() -> None:
    nvml = eight_gpus_two_models()
    p = poller(nvml)
    p.poll()
    p.close()
    assert nvml.calls.count("nvmlGpmSampleFree") == 8  # two samples per H100
    assert nvml.calls[-2:] == ["nvmlEventSetFree", "nvmlShutdown"]
    assert p.poll() == []


def test_samples_survive_the_wire() -> None:
    (sample, *_) = poller(eight_gpus_two_models()).poll()
    assert decode(encode(sample)) == sample


@pytest.mark.gpu
def test_real_nvml_where_a_gpu_is_present() -> None:
    pynvml = pytest.importorskip("pynvml")
    p = NvmlPoller(pynvml, run="real", node="gpu-host")
    if not p.start():
        pytest.skip("no NVIDIA driver or GPU here")
    try:
        p.poll()
        samples = p.poll()
    finally:
        p.close()
    assert samples and all(s.uuid and s.uuid.startswith("GPU-") for s in samples)
    assert all(s.mem_total_bytes and s.mem_total_bytes > 0 for s in samples)
    assert all(s.util_gpu_pct is not None and 0 <= s.util_gpu_pct <= 100 for s in samples)
