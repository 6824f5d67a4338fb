"""Peak dense throughput of GPU models and nominal link bandwidths, each with its source.

MFU is only as honest as its denominator. Vendors headline sparse (2:4) tensor figures; MFU
is measured against the *dense* peak, so every number here is the datasheet's dense figure
(the sparse one halved where the sheet only prints that). The table is data, not code, so a
reviewer can check each row against the cited sheet.

Which peak applies depends on the dtype the matmuls run in: bf16/fp16 use the tensor-core
rate; plain fp32 uses the CUDA-core rate, because PyTorch leaves TF32 matmuls off by default
(``torch.backends.cuda.matmul.allow_tf32``); ``tf32`` is offered for runs that turn it on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dsmon.ds_config.read import section_enabled

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")

_NV = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center"
_A100 = f"{_NV}/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_T4 = f"{_NV}/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
_A10 = f"{_NV}/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf"
_L4 = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_L40S = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_AMPERE_GA102 = (
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
_MI300X = "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf"
_MI250X = "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/product-briefs/instinct-mi250x-brochure.pdf"


@dataclass(frozen=True, slots=True)
class GpuPeak:
    """Dense peak TFLOPS of one GPU model per dtype.

    ``pattern`` is matched (case-insensitive, ``re.search``) against the name NVML reports,
    e.g. ``NVIDIA A100-SXM4-80GB``; the first matching row of :data:`PEAKS` wins, so more
    specific variants come first.
    """

    model: str
    pattern: str
    tflops: Mapping[str, float]
    source: str
    note: str = ""


PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak("H100 NVL", r"h100\s*nvl", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}, _H100, "sheet lists sparse; halved"),
    GpuPeak("H100 PCIe", r"h100.*pcie", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}, _H100, "sheet lists sparse; halved"),
    GpuPeak("H100 SXM", r"h100|h800", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, _H100, "sheet lists sparse; halved"),
    GpuPeak("H200", r"h200", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, _H200, "same compute as H100 SXM"),
    GpuPeak("A100", r"a100|a800", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, _A100, "SXM and PCIe share the dense figures"),
    GpuPeak("A10", r"\ba10\b", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, _A10),
    GpuPeak("L40S", r"l40s", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.0, "fp16": 362.0, "fp8": 733.0}, _L40S, "sheet lists sparse; halved"),
    GpuPeak("L4", r"\bl4\b", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}, _L4, "sheet lists sparse; halved"),
    GpuPeak("V100S", r"v100s", {"fp32": 16.4, "fp16": 130.0}, _V100),
    GpuPeak("V100 SXM2", r"v100.*sxm", {"fp32": 15.7, "fp16": 125.0}, _V100),
    GpuPeak("V100 PCIe", r"v100", {"fp32": 14.0, "fp16": 112.0}, _V100),
    GpuPeak("T4", r"\bt4\b", {"fp32": 8.1, "fp16": 65.0}, _T4),
    GpuPeak("RTX 4090", r"rtx\s*4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3}, _ADA, "GeForce: fp32-accumulate tensor rate"),
    GpuPeak("RTX 3090", r"rtx\s*3090", {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0}, _AMPERE_GA102, "GeForce: fp32-accumulate tensor rate"),
    GpuPeak("MI300X", r"mi300x", {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, _MI300X),
    GpuPeak("MI250X", r"mi250x", {"fp32": 95.7, "bf16": 383.0, "fp16": 383.0}, _MI250X, "fp32 is the matrix rate"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReferenceRange:
    """A published achieved-throughput band to hold a run against."""

    gpu: str
    dtype: str
    low_tflops: float
    high_tflops: float
    label: str
    source: str


#: A published reference for A100 training throughput: Megatron-LM's measured per-GPU
#: throughput on A100 (Narayanan et al. 2021, Table 1: 1.7B -> 1T params).
A100_REFERENCE = ReferenceRange(
    gpu="A100",
    dtype="fp16",
    low_tflops=137.0,
    high_tflops=163.0,
    label="Megatron-LM GPT, 1.7B-1T params on A100 (44-52 % of the 312 TFLOPS peak)",
    source="https://arxiv.org/abs/2104.04473",
)


def find_peak(gpu_name: str | None) -> GpuPeak | None:
    """The peaks row for a GPU name as NVML reports it, or None when the model is unknown."""
    if not gpu_name:
        return None
    low = gpu_name.lower()
    return next((p for p in PEAKS if re.search(p.pattern, low)), None)


def peak_by_model(model: str) -> GpuPeak | None:
    """The peaks row with this exact ``model`` label (the dashboard's model picker)."""
    return next((p for p in PEAKS if p.model == model), None)


def peak_tflops(gpu_name: str | None, dtype: str) -> float | None:
    """Dense peak TFLOPS for a GPU name and dtype; None when either is not in the table."""
    row = find_peak(gpu_name)
    return None if row is None else row.tflops.get(dtype)


def training_dtype(config: Mapping[str, Any] | None) -> str:
    """The matmul dtype a DeepSpeed config trains in: ``bf16``, ``fp16`` or ``fp32``.

    Reads the user's JSON form (``{"bf16": {"enabled": true}}``, also the legacy
    ``bfloat16`` key); a config without either section trains in fp32.
    """
    if not config:
        return "fp32"
    if section_enabled(config, "bf16"):
        return "bf16"
    return "fp16" if section_enabled(config, "fp16") else "fp32"


def mfu(achieved_tflops: float | None, peak: float | None) -> float | None:
    """Model FLOPs utilisation as a fraction (0.42 = 42 %); None when either side is unknown."""
    if achieved_tflops is None or not peak:
        return None
    return achieved_tflops / peak


@dataclass(frozen=True, slots=True)
class LinkBandwidth:
    """Nominal one-direction bandwidth of an interconnect, in the comms logger's unit (Gbps)."""

    name: str
    gbps: float
    source: str


#: DeepSpeed's comms logger reports algbw/busbw in Gbps (bytes/ms * 8 / 1e6), so links are
#: given in gigabits per second per direction, per GPU.
LINKS: tuple[LinkBandwidth, ...] = (
    LinkBandwidth("NVLink 4 (H100 SXM, 450 GB/s per direction)", 3600.0, _H100),
    LinkBandwidth("NVLink 3 (A100 SXM, 300 GB/s per direction)", 2400.0, _A100),
    LinkBandwidth("PCIe 5.0 x16 (64 GB/s per direction)", 512.0, "PCI-SIG PCIe 5.0 base spec"),
    LinkBandwidth("PCIe 4.0 x16 (32 GB/s per direction)", 256.0, "PCI-SIG PCIe 4.0 base spec"),
    LinkBandwidth("InfiniBand NDR 400 Gb/s", 400.0, "NVIDIA ConnectX-7 datasheet"),
    LinkBandwidth("InfiniBand HDR 200 Gb/s", 200.0, "NVIDIA ConnectX-6 datasheet"),
    LinkBandwidth("Ethernet 100 Gb/s", 100.0, "IEEE 802.3"),
    LinkBandwidth("Ethernet 25 Gb/s", 25.0, "IEEE 802.3"),
)


def find_link(name: str) -> LinkBandwidth | None:
    """The link row with this exact ``name``."""
    return next((link for link in LINKS if link.name == name), None)


#: The link inside one node of each GPU model that has a known one (``re.search`` on the name
#: NVML reports): NVLink for the SXM boards, the PCIe generation of the PCIe cards.
NODE_LINKS: tuple[tuple[str, str], ...] = (
    (r"h100.*pcie", LINKS[2].name),
    (r"a100.*pcie", LINKS[3].name),
    (r"h100|h200|h800|gh200", LINKS[0].name),
    (r"a100|a800", LINKS[1].name),
)


def expected_link(gpu_names: Sequence[str], nodes: int | None) -> LinkBandwidth | None:
    """The link a collective inside one node of these GPUs is expected to run at, if known.

    Only for a one-node run of one GPU model: between nodes the network decides, which the
    GPU's name does not tell.
    """
    models = {n.strip().lower() for n in gpu_names if n}
    if nodes != 1 or len(models) != 1:
        return None
    (name,) = models
    return next((find_link(link) for pattern, link in NODE_LINKS if re.search(pattern, name)), None)
