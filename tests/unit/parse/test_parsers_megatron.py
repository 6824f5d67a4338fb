"""MegatronParser on real iteration lines of several Megatron-DeepSpeed / Megatron-LM versions.

Data (see each folder's README.md): megatron_ds095_llama (Megatron-DeepSpeed + DeepSpeed 0.9.5, public
notes repository), megatron_alcf_tgs (ALCF Megatron-DeepSpeed fork README), megatron_lm_issues (lines
pasted in three GitHub issues).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from locations import DATA

from dsmon.model.records import IterationRecord
from dsmon.parse.base import ParseContext
from dsmon.parse.families.megatron import MegatronParser
from dsmon.parse.lines import LineCleaner
from dsmon.parse.log import parse_text


def iterations(rel: str, text: str | None = None) -> tuple[list[IterationRecord], dict[str, int]]:
    if text is None:
        text = (DATA / rel).read_text(encoding="utf-8")
    recs, diag = parse_text(text, run="r", file=Path(rel).name)
    mine = [r for r in recs if isinstance(r, IterationRecord) and r.fmt == "megatron"]
    return mine, {k: n for k, n in diag.unparsed.items() if k.startswith("megatron")}


def test_megatron_deepspeed_with_tokens_and_tflops() -> None:
    recs, unparsed = iterations("megatron_ds095_llama/train.log")
    assert unparsed == {}
    assert [r.iteration for r in recs] == [1, 2, 3, 2498, 2499, 2500]
    first = recs[0]
    assert first == IterationRecord(
        src=first.src,
        ts="2023-08-15T06:31:42.452",  # no time of its own: the nearest preceding logger line
        step=1,
        fmt="megatron",
        iteration=1,
        total_iterations=2500,
        consumed_samples=32,
        consumed_tokens=65536,
        elapsed_ms=4220.8,
        lr=0.0,
        global_batch_size=32,
        loss=10.65542,
        losses={"lm loss": 10.65542},
        loss_scale=32768.0,
        grad_norm=0.0,
        skipped_iterations=0,
        nan_iterations=0,
        samples_per_s=7.582,
        flops_per_s_per_gpu=first.flops_per_s_per_gpu,
        actual_seqlen=2048,  # "actual seqlen:  2048"
        num_zeros=0,  # "num zeros: 0.0"
    )
    assert first.flops_per_s_per_gpu == pytest.approx(16.98e12, rel=1e-12)  # "TFLOPs: 16.98"
    assert (first.src.line, first.src.rank) == (239, None)
    last = recs[-1]
    assert (last.step, last.consumed_tokens, last.loss, last.loss_scale) == (
        2500,
        163840000,
        12.54951,
        1.0,
    )
    assert last.lr == 1.371e-04
    assert last.ts == "2023-08-15T07:22:31.764"


def test_alcf_fork_with_tgs_and_no_grad_norm() -> None:
    recs, _ = iterations("megatron_alcf_tgs/train.log")
    a, b = recs
    assert (a.iteration, a.total_iterations, a.src.line) == (199, 317892, 2)
    assert a.consumed_samples == 152832
    assert a.consumed_tokens == 625999872
    assert a.elapsed_ms == 14287.5
    assert a.lr == 2.407e-04
    assert a.global_batch_size == 768
    assert a.loss == 5.905366
    assert a.loss_scale == 8192.0
    assert a.grad_norm is None  # not printed by this version
    assert a.samples_per_s == 53.753
    assert a.flops_per_s_per_gpu == pytest.approx(69.85e12, rel=1e-12)
    assert a.tokens_per_gpu_per_s == 1146.733  # "tokens per gpu per second (tgs): 1146.733"
    assert b.tokens_per_gpu_per_s == 1126.713
    assert a.ts == "2024-03-07T15:27:02.646"
    assert (b.iteration, b.ts) == (200, "2024-03-07T15:27:17.188")


def test_older_line_without_tokens_or_tflops() -> None:
    recs, _ = iterations("megatron_lm_issues/epfllm_issue11.log")
    assert [r.iteration for r in recs] == [182, 183, 184]
    r = recs[0]
    assert (r.consumed_samples, r.consumed_tokens, r.elapsed_ms) == (186368, None, 126995.3)
    assert (r.lr, r.global_batch_size, r.loss, r.grad_norm) == (1.365e-05, 1024, 2.38264, 0.227)
    assert (r.samples_per_s, r.flops_per_s_per_gpu) == (None, None)
    assert r.ts is None  # nothing in the file carries a time


def test_skipped_iterations_without_loss_and_a_cut_last_line() -> None:
    recs, diag = parse_text(
        (DATA / "megatron_lm_issues/nccl_issue743.log").read_text(), run="r", file="x.log"
    )
    assert diag.unparsed["megatron_iteration"] == 0
    assert diag.cut["megatron_iteration"] == 1
    assert diag.examples["megatron_iteration"][0].startswith("x.log:8:  iteration       20/")
    # iteration 20 is cut inside "number of skipp...": counted, nothing half-stored
    (r,) = [x for x in recs if isinstance(x, IterationRecord) and x.fmt == "megatron"]
    assert (r.iteration, r.src.line) == (10, 6)
    assert (r.loss, r.losses) == (None, {})
    assert (r.skipped_iterations, r.nan_iterations) == (10, 0)
    assert r.loss_scale == 8388608.0
    assert r.lr == 0.0


def test_megatron_lm_timestamp_prefix_and_extra_loss() -> None:
    recs, _ = iterations("health_megatron_h100/train.log")
    r = recs[0]
    assert (r.iteration, r.total_iterations, r.ts) == (43, 100, "2024-04-06T02:59:36.000")
    assert r.flops_per_s_per_gpu == pytest.approx(239.8e12, rel=1e-12)
    assert r.losses == {"lm loss": 1.825991, "load_balancing_loss": 1.019746}
    assert r.loss == 1.825991
    assert (r.lr, r.grad_norm, r.consumed_samples) == (8.6e-06, 1.426, 5504)
    assert [x.ts for x in recs[1:]] == ["2024-04-06T02:59:41.000", "2024-04-06T02:59:47.000"]


def test_named_losses_keep_their_order() -> None:
    line = (DATA / "megatron_lm_issues/nccl_issue743.log").read_text().splitlines()[-1]
    # the cut line, completed only up to its last whole field: "lm loss" and "sop loss" both kept
    whole = line[: line.rindex("|") + 1]
    (r,), _ = iterations("x.log", whole)
    assert r.losses == {"lm loss": 10.05022, "sop loss": 0.8174902}
    assert r.loss == 10.05022
    assert r.grad_norm == 217.199


def test_terminal_wrapped_line_is_joined() -> None:
    line = (DATA / "megatron_lm_issues/epfllm_issue11.log").read_text().splitlines()[0]
    cut = line.index("number of skipped") + len("number of sk")
    (joined,), _ = iterations("x.log", line[:cut] + "\n" + line[cut:])
    (whole,), _ = iterations("x.log", line)
    assert joined.skipped_iterations == 0
    assert joined == whole


def test_known_field_without_a_number_is_counted_not_stored() -> None:
    line = (DATA / "megatron_lm_issues/epfllm_issue11.log").read_text().splitlines()[1]
    bad = line.replace("lm loss: 2.471678E+00", "lm loss: -")
    recs, unparsed = iterations("x.log", bad)
    assert recs == []
    assert unparsed == {"megatron_iteration": 1}


def test_other_lines_are_not_claimed() -> None:
    ctx = ParseContext("r", "x.log")
    parser = MegatronParser()
    cleaner = LineCleaner()
    text = (DATA / "megatron_ds095_llama/train.log").read_text().splitlines()
    claimed = [
        i
        for i, raw in enumerate(text, 1)
        for ln in cleaner.clean(raw, i)
        if parser.feed(ln, ctx) is not None
    ]
    # the iteration lines, and the two "(min, max) time across ranks (ms):" blocks with their rows
    assert claimed == [155, 156, 230, 231, 232, 239, 242, 245, 248, 252, 259]
