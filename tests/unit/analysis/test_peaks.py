"""Peak dense TFLOPS per GPU model and dtype, and MFU against them."""

from __future__ import annotations

import pytest

from dsmon.analysis.peaks import (
    A100_REFERENCE,
    LINKS,
    PEAKS,
    find_peak,
    mfu,
    peak_tflops,
    training_dtype,
)


@pytest.mark.parametrize(
    ("nvml_name", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_nvml_names_find_their_row(nvml_name: str, model: str) -> None:
    row = find_peak(nvml_name)
    assert row is not None and row.model == model


def test_unknown_models_have_no_peak() -> None:
    assert find_peak("NVIDIA A10G") is None  # AWS part, no published datasheet figure
    assert find_peak(None) is None
    assert peak_tflops("cpu", "fp32") is None


def test_dense_figures() -> None:
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 312.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("Tesla V100-SXM2-32GB", "bf16") is None  # Volta has no bf16 tensor cores
    assert all(p.source.startswith("https://") for p in PEAKS)
    assert A100_REFERENCE.low_tflops / 312.0 == pytest.approx(0.44, abs=0.01)


def test_training_dtype_from_config() -> None:
    assert training_dtype({"bf16": {"enabled": True}}) == "bf16"
    assert training_dtype({"bfloat16": {"enabled": True}}) == "bf16"
    assert training_dtype({"fp16": {"enabled": True}, "bf16": {"enabled": False}}) == "fp16"
    assert training_dtype({"fp16": {"enabled": False}}) == "fp32"
    assert training_dtype(None) == "fp32"


def test_mfu() -> None:
    assert mfu(156.0, 312.0) == 0.5
    assert mfu(None, 312.0) is None
    assert mfu(10.0, None) is None


def test_links_in_gbps() -> None:
    by_name = {link.name: link.gbps for link in LINKS}
    assert by_name["PCIe 4.0 x16 (32 GB/s per direction)"] == 256.0
    assert by_name["InfiniBand HDR 200 Gb/s"] == 200.0
