"""What a GPU sample holds and how NVML gives it: one table of field readers, with units.

The table is data: adding a field is one row here, the poller's
(:mod:`collectors.gpu.nvml`) per-field error handling applies to it unchanged. Units follow NVML's
documentation: power and its limit are read in mW, energy in mJ, PCIe throughput in KB/s (taken
as KiB/s, as nvitop does); the record holds W, J and bytes/s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The GPM metrics (Hopper and newer): record field and NVML metric constant.
GPM_METRICS = (
    ("gpm_sm_active_pct", "NVML_GPM_METRIC_SM_UTIL"),
    ("gpm_tensor_active_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("gpm_dram_bw_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)


@dataclass(frozen=True, slots=True)
class Reader:
    """How to read some record fields: NVML calls to try in order, and the unit conversion.

    ``calls`` holds ``(function, constant names of the extra arguments, keyword arguments)``;
    a later call is tried when an earlier one is missing from the driver or the bindings
    (``nvmlDeviceGetMemoryInfo`` v2 before v1, clock-event reasons before throttle reasons).
    """

    fields: tuple[str, ...]
    calls: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...]
    convert: Callable[[Any], tuple[Any, ...]]


def _one(fn: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, ...]]:
    return lambda v: (fn(v),)


def _call(
    fn: str, *args: str, **kwargs: str
) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    return (fn, args, tuple(kwargs.items()))


_MEM_V2 = {"version": "nvmlMemory_v2"}
_ECC = "nvmlDeviceGetTotalEccErrors"
_PCIE = "nvmlDeviceGetPcieThroughput"


def _util(u: Any) -> tuple[Any, ...]:
    return (float(u.gpu), float(u.memory))


def _memory(m: Any) -> tuple[Any, ...]:
    return (int(m.used), int(m.total))


def _milli(v: Any) -> float:
    return v / 1000.0


def _kib(v: Any) -> float:
    return v * 1024.0


# Every field of a sample, as data (nvitop keeps a table of queries, not 400 lines of calls).
# fmt: off
READERS: tuple[Reader, ...] = (
    Reader(("util_gpu_pct", "util_mem_pct"), (_call("nvmlDeviceGetUtilizationRates"),), _util),
    Reader(("mem_used_bytes", "mem_total_bytes"),
           (_call("nvmlDeviceGetMemoryInfo", **_MEM_V2), _call("nvmlDeviceGetMemoryInfo")), _memory),
    Reader(("power_w",), (_call("nvmlDeviceGetPowerUsage"),), _one(_milli)),
    Reader(("power_limit_w",), (_call("nvmlDeviceGetEnforcedPowerLimit"),), _one(_milli)),
    Reader(("energy_j",), (_call("nvmlDeviceGetTotalEnergyConsumption"),), _one(_milli)),
    Reader(("temperature_c",), (_call("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU"),), _one(float)),
    Reader(("sm_clock_mhz",), (_call("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),), _one(float)),
    Reader(("mem_clock_mhz",), (_call("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),), _one(float)),
    Reader(("throttle_reasons",), (_call("nvmlDeviceGetCurrentClocksEventReasons"),
                                   _call("nvmlDeviceGetCurrentClocksThrottleReasons")), _one(int)),
    Reader(("pcie_tx_bytes_per_s",), (_call(_PCIE, "NVML_PCIE_UTIL_TX_BYTES"),), _one(_kib)),
    Reader(("pcie_rx_bytes_per_s",), (_call(_PCIE, "NVML_PCIE_UTIL_RX_BYTES"),), _one(_kib)),
    Reader(("ecc_corrected",),
           (_call(_ECC, "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),), _one(int)),
    Reader(("ecc_uncorrected",),
           (_call(_ECC, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),), _one(int)),
)
# fmt: on
