"""GPU samples made to order for the store and view tests: one sample, a day of them, odd ones."""

from __future__ import annotations

from dsmon.model.records import EventRecord, GpuSampleRecord, Record, Source

RUN = "g"


GIB = 1024**3


def sample(sec: int, gpu: int, node: str = "n0", **fields: object) -> GpuSampleRecord:
    """One poll as the collector makes it; ``fields`` override the defaults."""
    values: dict[str, object] = {
        "uuid": f"GPU-{node}-{gpu}",
        "name": "NVIDIA H100 80GB HBM3",
        "util_gpu_pct": float((sec * 7 + gpu * 13) % 101),
        "mem_used_bytes": (40 + sec % 30) * GIB,
        "mem_total_bytes": 80 * GIB,
        "power_w": (300_000 + sec * 1_237 % 400_000) / 1000,
        "power_limit_w": 700.0,
        "energy_j": (10**9 + sec * 650_123) / 1000,
        "temperature_c": float(50 + sec % 30),
        "sm_clock_mhz": 1980.0,
        "throttle_reasons": 0x4 if sec % 7 == 0 else 0,
        "ecc_corrected": sec // 100,
        "pcie_tx_bytes_per_s": 1024.0 * (sec % 1000),
    }
    values.update(fields)
    ts = f"2026-11-29T10:{sec // 60 % 60:02d}:{sec % 60:02d}.{gpu:03d}"
    return GpuSampleRecord(src=Source(run=RUN, node=node), ts=ts, gpu_index=gpu, **values)  # type: ignore[arg-type]


def day(seconds: int = 900) -> list[GpuSampleRecord]:
    return [sample(sec, g, node) for sec in range(seconds) for node in ("n0", "n1") for g in (0, 1)]


def odd_ones() -> list[Record]:
    """Samples the typed columns cannot hold as they are: all must come back unchanged."""
    return [
        sample(5000, 0, ts_power := "n2", power_w=312.4567),  # not a whole mW
        sample(5001, 0, "n2", name="renamed by the driver"),  # a series field that changed
        sample(5002, 0, "n2", uuid=None, xid=79, ecc_uncorrected=1),
        GpuSampleRecord(src=Source(run=RUN, node=ts_power), ts="2026-11-29T12:00:00", gpu_index=1),
        GpuSampleRecord(
            src=Source(run=RUN, node="n2", file="nvml.jsonl", line=3), ts=None, gpu_index=2
        ),  # fmt: skip
        EventRecord(src=Source(run=RUN, node="n2", file="a.log", line=1), name="oom"),
    ]
