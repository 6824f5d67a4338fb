"""dsmon.model.units on the strings DeepSpeed really prints.

Every input below is copied from a file under tests/data/ (the file is named in a comment), so the
readers are checked against real output, not against strings written to fit them.
"""

from __future__ import annotations

import math

import pytest

from dsmon.model import units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("234.88 MMACs", 234.88e6),  # flops_z0: fwd MACs per GPU
        ("0 MACs", 0.0),  # flops_z0: aggregated depth 1, Embedding
        ("452.98 MMACs", 452.98e6),  # z3
        ("55.48 TMACs", 55.48e12),  # flops_auroragpt_exponents
        ("29.03 GMACs", 29.03e9),  # flops_v080_resnet18
        ("924.84 MMACs", 924.84e6),  # flops_v080_resnet18: layer2.0.conv1
        ("41271.95 G", 41271.95e9),  # flops_v0x_readme_megatron: MACs without the word
    ],
)
def test_parse_macs(text: str, expected: float) -> None:
    assert units.parse_macs(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("471.76 M", 471.76e6),  # flops_z0: fwd flops per GPU (no unit word)
        ("110.97 T", 110.97e12),  # flops_auroragpt_exponents
        ("58.18 G ", 58.18e9),  # flops_v080_resnet18, padded by '{:<8}'
        ("12 ", 12.0),  # number_to_string of a unit-less value: trailing space
        ("0", 0.0),
    ],
)
def test_parse_si(text: str, expected: float) -> None:
    assert units.parse_si(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("13.51 GFLOPS", 13.51e9),  # flops_z0
        ("260 mFLOPS", 0.26),  # flops_detailed_stdout: root module
        ("0 FLOPS", 0.0),
        ("0.0 FLOPS", 0.0),  # old str(round(x, 2))
        ("1.58 TFLOPS", 1.58e12),  # flops_v080_resnet18
        ("-7.49758e+17 uFLOPS", -7.49758e11),  # flops_auroragpt_exponents (':g' exponent form)
    ],
)
def test_parse_flops_rate(text: str, expected: float) -> None:
    assert units.parse_flops_rate(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("932.61 K", 932610.0),  # flops_z0: params per GPU
        ("2.39 B", 2.39e9),  # flops_auroragpt_exponents: params_to_string's B for billions
        ("9.41 k", 9410.0),  # flops_v080_resnet18: pre-v0.10.1 lower-case k
        ("513.0 k", 513000.0),  # flops_v080_resnet18: fc
        ("11.69 M ", 11.69e6),  # flops_v080_resnet18, padded
        ("256", 256.0),  # flops_detailed_stdout: LayerNorm params
        ("0", 0.0),
    ],
)
def test_parse_params(text: str, expected: float) -> None:
    assert units.parse_params(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("34.92 ms", 34.92),  # flops_z0: fwd latency
        ("7.35 ms ", 7.35),  # grad_accum, padded by '{:<8}'
        ("13.35 us", 0.01335),  # grad_accum: step latency
        ("833.75 us", 0.83375),
        ("1.89 s", 1890.0),  # flops_v0x_readme_megatron
        ("1.23 s", 1230.0),
        ("0 s", 0.0),  # flops_detailed_stdout: out_proj
        ("1.8 Gs", 1.8e12),  # flops_z0: the profiler's bogus top-module time, read as printed
        ("-2.9601e+08 us", -296010.0),  # flops_auroragpt_exponents
        ("3.2e-07", 0.00032),  # pre-v0.10.1 str(duration): bare seconds
    ],
)
def test_parse_duration_ms(text: str, expected: float) -> None:
    assert units.parse_duration_ms(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256.0 KB", 262144),  # comms_logger_verbose
        ("512.0 B", 512),  # comms_logger
        ("0B", 0),  # convert_size(0): no space
        ("1.5 KB", 1536),
        ("4.0 B", 4),
        ("3.56 MB", 3732931),  # round(3.56 * 1024**2) = round(3732930.56)
        ("1.78 MB", 1866465),  # round(1866465.28)
        ("96.75 KB", 99072),  # comms_z3_overlap_true
        ("1.12 KB", 1147),  # comms_v08_verbose: round(1146.88)
        ("678.86 MB", 711836303),  # comms_v07_docs: round(711836303.36)
        ("98.25 MB", 103022592),
    ],
)
def test_parse_size_bytes(text: str, expected: int) -> None:
    assert units.parse_size_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.37GB", 397284475),  # flops_z0 throughput line: MemAllocated=0.37GB, round(0.37 * 2**30)
        ("16.6GB", 17824114278),  # flops_auroragpt_exponents: MaxMemAllocated=16.6GB
        ("0.37 GB", 397284475),
        (0.37, 397284475),
    ],
)
def test_parse_gb_bytes(text: str | float, expected: int) -> None:
    assert units.parse_gb_bytes(text) == expected


def test_plain_numbers() -> None:
    assert units.parse_float("83.67   ") == 83.67  # flops_z0 samples/second, padded
    assert units.parse_float("-0.5") == -0.5  # flops_auroragpt_exponents samples/second
    assert units.parse_int("2       ") == 2  # flops_z0 world size, padded
    assert units.parse_int("2.0") is None
    nan = units.parse_float("nan")
    assert nan is not None and math.isnan(nan)


@pytest.mark.parametrize(
    ("reader", "text"),
    [
        (units.parse_macs, "12.3 ms"),  # another unit word is refused
        (units.parse_flops_rate, "13.51 GMACs"),
        (units.parse_duration_ms, "5 m"),  # a prefix without 's' is no duration
        (units.parse_duration_ms, "fast"),
        (units.parse_params, "1.2 XB"),
        (units.parse_size_bytes, "3.56 Mb"),
        (units.parse_size_bytes, "inf MB"),
        (units.parse_gb_bytes, "0.37TB"),
        (units.parse_si, ""),
        (units.parse_float, None),
        (units.parse_int, "two"),
    ],
)
def test_unreadable_is_none_not_an_error(reader: object, text: str | None) -> None:
    assert callable(reader)
    assert reader(text) is None
