"""Flops-profiler views and achieved TFLOPS, on real DeepSpeed output.

tests/data/z2/train.log profiles step 6: fwd flops per GPU 471.76 M, fwd latency 12.23 ms,
iter latency 50.45 ms, FLOPS per GPU 28.05 G, samples/second 158.56, aggregated depths 0-3
(depth 3 params: Sequential 526.85 K, MultiheadAttention 264.19 K, LayerNorm 2.05 K). Its
step 1 timers are fwd 350.75 + bwd 754.18 + step 190.22 = 1295.15 ms. ThroughputTimer lines
at steps 5 and 10 print CurrSamplesPerSec 127.5488... and 152.3143... tests/data/grad_accum
has gradient_accumulation_steps 4: four fwd_microstep lines per optimizer step.
"""

from __future__ import annotations

import pandas as pd
import pytest
from dashboard_support import read_records
from locations import DATA

from dsmon.analysis import flops, steps
from dsmon.analysis.peaks import find_peak
from dsmon.model.frames import records_frame
from dsmon.model.records import FlopsProfileRecord, Record
from dsmon.parse.log import parse_text


@pytest.fixture(scope="module")
def z2() -> list[Record]:
    return read_records("z2", "z2")


def profile_of(records: list[Record]) -> FlopsProfileRecord:
    found = flops.latest_profile([r for r in records if isinstance(r, FlopsProfileRecord)])
    assert found is not None
    return found


def test_summary_rows_in_readable_units(z2: list[Record]) -> None:
    table = flops.summary(profile_of(z2)).set_index("quantity")
    assert table.loc["fwd FLOPs per GPU"].tolist() == [pytest.approx(0.47176), "GFLOPs"]
    assert table.loc["iter latency (fwd + bwd + step)", "value"] == 50.45
    assert table.loc["TFLOPS per GPU over the iteration", "value"] == pytest.approx(0.02805)
    assert table.loc["samples/second", "value"] == 158.56
    assert "model parallel size" in table.index


def test_aggregated_section_keeps_print_order(z2: list[Record]) -> None:
    agg = flops.aggregated(profile_of(z2))
    depth3 = agg[(agg["depth"] == 3) & (agg["metric"] == "params")]
    assert depth3["module_class"].tolist() == ["Sequential", "MultiheadAttention", "LayerNorm"]
    assert depth3["rank"].tolist() == [1, 2, 3]
    assert depth3["value"].tolist() == [526850.0, 264190.0, 2050.0]


def test_top_modules_fall_back_to_the_aggregated_section(z2: list[Record]) -> None:
    top = flops.top_modules(profile_of(z2), "macs", 2)
    assert top["module"].tolist() == ["Sequential", "MultiheadAttention"]
    assert top["value"].tolist() == [134220000.0, 83890000.0]
    assert flops.module_tree(profile_of(z2)).empty  # detailed: false


def test_step_tflops_scale_the_profile_by_each_step(z2: list[Record]) -> None:
    bd = steps.step_breakdown(records_frame("timer", z2))
    per_step = flops.step_tflops(bd, profile_of(z2), 1)
    first = per_step.iloc[0]
    assert first["step"] == 1
    assert first["tflops"] == pytest.approx(3 * 471.76e6 / 1.29515 / 1e12)
    assert len(per_step) == 30


def test_micro_batches_per_step() -> None:
    ga = read_records("grad_accum", "ga")
    micro = steps.micro_breakdown(records_frame("timer", ga))
    assert flops.micro_batches_per_step(micro) == 4
    assert flops.micro_batches_per_step(pd.DataFrame()) == 1


def test_throughput_per_step(z2: list[Record]) -> None:
    tp = flops.throughput(records_frame("throughput", z2))
    assert tp["step"].tolist()[:2] == [5, 10]
    assert tp["samples_per_s"].tolist()[:2] == pytest.approx(
        [127.54886405854509, 152.31438650869256]
    )
    assert flops.throughput(pd.DataFrame()).empty


def test_mfu_rows() -> None:
    rows = flops.mfu_rows(156.0, find_peak("NVIDIA A100-SXM4-80GB"), "bf16").set_index("quantity")
    assert rows.loc["dense bf16 peak TFLOPS (A100)", "value"] == 312.0
    assert rows.loc["MFU %", "value"] == 50.0
    # what is not known is left out of the table, and said in one line (never a raw None)
    unknown = flops.mfu_rows(0.03, None, "fp32")
    assert unknown["quantity"].tolist() == ["achieved TFLOPS per GPU"]
    assert flops.mfu_missing(0.03, None, "fp32") == (
        "MFU needs the GPU's peak: pick the GPU model above"
    )
    assert flops.mfu_missing(156.0, find_peak("NVIDIA A100-SXM4-80GB"), "bf16") is None


def test_latest_profile_prefers_a_whole_one_to_a_cut_one() -> None:
    """grad_accum's log stopped a few lines into its fourth profile block (line 375)."""
    lines = (DATA / "grad_accum/train.log").read_text(encoding="utf-8").splitlines()
    recs, _ = parse_text("\n".join(lines[:390]), "r", "train.log")
    profiles = [r for r in recs if isinstance(r, FlopsProfileRecord)]
    assert [(p.src.line, p.partial) for p in profiles] == [
        (221, False),
        (272, False),
        (323, False),
        (375, True),
    ]
    chosen = flops.latest_profile(profiles)
    assert chosen is not None and chosen.src.line == 323
    assert flops.latest_profile(profiles[-1:]) is profiles[-1]  # nothing whole: the cut one
