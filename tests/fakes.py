"""FakeNvml: a stand-in for the ``pynvml`` module, with per-GPU answer tables (gpustat's idea).

It has the function and constant names of nvidia-ml-py that the poller calls, and its errors
carry NVML's codes in ``.value`` like ``pynvml.NVMLError``. Each GPU answers from a table
keyed by ``(function, *args)`` or ``function``; an answer is a value, an exception instance
(a fresh copy of it is raised at each call, as real pynvml builds a new ``NVMLError`` for each
failed call: re-raising one stored instance would lengthen its traceback at every raise and
keep every earlier caller's frames alive), or a callable of the poll count (for counters that grow). Scenario builders at the
bottom give the situations the poller must survive: eight GPUs of two models, a field not
supported, a GPU lost mid-run, no driver.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# Codes and constants: the values of nvidia-ml-py 13 (pynvml.py).
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
nvmlMemory_v2 = 0x02000028  # noqa: N816 - pynvml's name
nvmlEventTypeXidCriticalError = 0x8  # noqa: N816 - pynvml's name
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRICS_GET_VERSION = 1
_NAMES = {
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    6: "Not Found",
    9: "Driver Not Loaded",
    10: "Timeout",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
}


class NVMLError(Exception):  # noqa: N818 - pynvml's name
    """Like ``pynvml.NVMLError``: the NVML return code is in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"NVML Error with code {self.value}")


@dataclass
class FakeGpu:
    """One GPU: its identity, answer table, GPM metric values, MIG instances, whether lost."""

    name: str
    uuid: str
    answers: dict[Any, Any]
    gpm: dict[int, float] | None = None
    lost_at_poll: int | None = None
    migs: list[str] | None = None  # MIG instance UUIDs when MIG mode is on


@dataclass
class _Sample:
    seq: int = -1


class c_nvmlGpmMetricsGet_t:  # noqa: N801 - pynvml's name
    """The GPM request structure: version, samples, and 210 metric slots."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(210)]


@dataclass
class FakeNvml:
    """The fake module. ``polls`` counts utilisation reads of the first GPU polled (one per poll)."""

    gpus: list[FakeGpu]
    init_error: int | None = None
    calls: list[str] = field(default_factory=list)
    polls: int = 0
    xids: list[tuple[int, int]] = field(default_factory=list)
    _handles: dict[int, Any] = field(default_factory=dict)
    _first_polled: int | None = None
    NVMLError: type[NVMLError] = NVMLError

    def __getattr__(self, name: str) -> Any:
        value = globals().get(name)
        if value is None or name.startswith("_"):
            raise AttributeError(name)
        return value

    # --- library ---------------------------------------------------------------------------

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names from here on
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: N802
        self.calls.append(f"handle{index}")
        return self._handles.setdefault(index, SimpleNamespace(index=index))

    # --- per-GPU fields ----------------------------------------------------------------------

    def _answer(self, handle: Any, fn: str, *args: Any) -> Any:
        gpu = self.gpus[handle.index]
        if gpu.lost_at_poll is not None and self.polls >= gpu.lost_at_poll:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        answer = gpu.answers.get((fn, *args), gpu.answers.get(fn))
        if answer is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if isinstance(answer, BaseException):
            raise copy.copy(answer)  # a new instance: no traceback carried over from the last raise
        return answer(self.polls) if callable(answer) else answer

    def nvmlDeviceGetName(self, h: Any) -> str:  # noqa: N802
        return self.gpus[h.index].name

    def nvmlDeviceGetUUID(self, h: Any) -> str:  # noqa: N802
        gpu = self.gpus[h.index]
        return gpu.uuid if getattr(h, "mig", None) is None else (gpu.migs or [])[h.mig]

    # --- MIG (A100/H100 in MIG mode): 7 slots, the first len(migs) filled ---------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:  # noqa: N802
        if self.gpus[h.index].migs is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, i: int) -> Any:  # noqa: N802
        if i >= len(self.gpus[h.index].migs or []):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(index=h.index, mig=i)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:  # noqa: N802
        if self._first_polled is None:
            self._first_polled = h.index
        if h.index == self._first_polled:
            self.polls += 1
        gpu, mem = self._answer(h, "util")
        return SimpleNamespace(gpu=gpu, memory=mem)

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:  # noqa: N802
        used, total = self._answer(h, "memory", version)
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:  # noqa: N802
        return int(self._answer(h, "power_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:  # noqa: N802
        return int(self._answer(h, "limit_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:  # noqa: N802
        return int(self._answer(h, "energy_mj"))

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:  # noqa: N802
        return int(self._answer(h, "temp", sensor))

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:  # noqa: N802
        return int(self._answer(h, "clock", clock))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:  # noqa: N802
        return int(self._answer(h, "reasons"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any) -> int:  # noqa: N802
        return int(self._answer(h, "throttle_reasons"))

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:  # noqa: N802
        return int(self._answer(h, "pcie_kib", counter))

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:  # noqa: N802
        return int(self._answer(h, "ecc", kind, counter))

    # --- GPM ---------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:  # noqa: N802
        return SimpleNamespace(isSupportedDevice=int(self.gpus[h.index].gpm is not None))

    def nvmlGpmSampleAlloc(self) -> _Sample:  # noqa: N802
        return _Sample()

    def nvmlGpmSampleFree(self, sample: _Sample) -> None:  # noqa: N802
        self.calls.append("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, h: Any, sample: _Sample) -> _Sample:  # noqa: N802
        self._answer(h, "util")  # a lost GPU fails here too
        sample.seq = self.polls
        return sample

    def nvmlGpmMetricsGet(self, request: c_nvmlGpmMetricsGet_t) -> Any:  # noqa: N802
        if not request.sample1.seq < request.sample2.seq:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)  # samples swapped or not taken
        gpu = next(g for g in self.gpus if g.gpm is not None)
        assert gpu.gpm is not None
        for m in request.metrics[: request.numMetrics]:
            m.value = gpu.gpm[m.metricId]
        return request

    # --- events ------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "event-set"

    def nvmlEventSetFree(self, event_set: Any) -> None:  # noqa: N802
        self.calls.append("nvmlEventSetFree")

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, event_set: Any) -> None:  # noqa: N802
        if "xid" not in self.gpus[h.index].answers:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:  # noqa: N802
        if not self.xids:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        index, xid = self.xids.pop(0)
        return SimpleNamespace(device=self._handles[index], eventType=8, eventData=xid)


def h100(i: int) -> FakeGpu:
    """An H100: every field answers, GPM supported, XID events registered."""
    return FakeGpu(
        "NVIDIA H100 80GB HBM3",
        f"GPU-h100-{i:04d}",
        {
            "util": (87, 41),
            ("memory", nvmlMemory_v2): (61_234_567_168, 85_520_809_984),
            "power_mw": 612_345,
            "limit_mw": 700_000,
            "energy_mj": lambda n: 123_456_789 + 600_000 * n,
            ("temp", NVML_TEMPERATURE_GPU): 64,
            ("clock", NVML_CLOCK_SM): 1980,
            ("clock", NVML_CLOCK_MEM): 2619,
            "reasons": 0x4,  # SW power cap
            ("pcie_kib", NVML_PCIE_UTIL_TX_BYTES): 2048,
            ("pcie_kib", NVML_PCIE_UTIL_RX_BYTES): 4096,
            ("ecc", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC): 3,
            ("ecc", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC): 0,
            "xid": True,
        },
        # doubles as NVML computes them; the collector keeps hundredths of a percent
        gpm={NVML_GPM_METRIC_SM_UTIL: 71.50493, NVML_GPM_METRIC_ANY_TENSOR_UTIL: 43.2517,
             NVML_GPM_METRIC_DRAM_BW_UTIL: 54.996128},
    )  # fmt: skip


def a100(i: int) -> FakeGpu:
    """An A100: no GPM (pre-Hopper), memory info v1 only (an older driver)."""
    return FakeGpu(
        "NVIDIA A100-SXM4-40GB",
        f"GPU-a100-{i:04d}",
        {
            "util": (12, 3),
            ("memory", None): (1_073_741_824, 42_949_672_960),
            ("memory", nvmlMemory_v2): NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND),
            "power_mw": 95_000,
            "limit_mw": 400_000,
            "energy_mj": 9_000_000,
            ("temp", NVML_TEMPERATURE_GPU): 35,
            ("clock", NVML_CLOCK_SM): 210,
            ("clock", NVML_CLOCK_MEM): 1215,
            "reasons": 0x1,  # GPU idle
            ("pcie_kib", NVML_PCIE_UTIL_TX_BYTES): 0,
            ("pcie_kib", NVML_PCIE_UTIL_RX_BYTES): 16,
            ("ecc", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC): 0,
            ("ecc", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC): 0,
            "xid": True,
        },
    )


def eight_gpus_two_models() -> FakeNvml:
    """A DGX-like node mixing models: four H100s then four A100s."""
    return FakeNvml([h100(i) for i in range(4)] + [a100(i) for i in range(4, 8)])


def field_not_supported() -> FakeNvml:
    """A consumer GPU: no ECC, no power reading, old driver without clock-event reasons."""
    gpu = a100(0)
    gpu.name = "NVIDIA GeForce RTX 3090"
    gpu.answers.pop(("ecc", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC))
    gpu.answers.pop(("ecc", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC))
    gpu.answers["power_mw"] = NVMLError(NVML_ERROR_NO_PERMISSION)
    gpu.answers["reasons"] = NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    gpu.answers["throttle_reasons"] = 0x4
    return FakeNvml([gpu, h100(1)])


def gpu_lost_mid_run(at_poll: int = 3) -> FakeNvml:
    """Two H100s; GPU 1 falls off the bus from poll ``at_poll`` on (GH-125 in gpustat)."""
    nvml = FakeNvml([h100(0), h100(1)])
    nvml.gpus[1].lost_at_poll = at_poll
    return nvml


def no_driver() -> FakeNvml:
    """A machine without the NVIDIA driver: nvmlInit fails."""
    return FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
