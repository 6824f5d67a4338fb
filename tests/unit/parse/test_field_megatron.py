"""Megatron-DeepSpeed output as users pasted it: iteration lines of four generations, per-rank
memory lines, Megatron's own timers. Expected values are read off the excerpts by hand
(../shared/corpus/field, excerpts 05, 07, 17, 33, 47)."""

from __future__ import annotations

import pytest
from field_logs import lines, of, parse_field

from dsmon.model.records import IterationRecord, MemoryRecord, ThroughputRecord, TimerRecord
from dsmon.parse.log import parse_text

MIB = 1024 * 1024


def test_05_bigscience_3d_iterations_and_per_rank_memory() -> None:
    recs, diag = parse_field(5)
    assert sum(diag.unparsed.values()) == 0  # the bare "time (ms)" lines are no error
    its = of(recs, IterationRecord)
    assert [r.iteration for r in its] == [1, 2, 3, 4, 5, 6, 7, 8]
    first = its[0]
    assert (first.total_iterations, first.consumed_samples, first.global_batch_size) == (
        1000,
        1024,
        1024,
    )
    assert first.elapsed_ms == 159778.9
    assert first.lr == 1.875e-05
    assert first.losses == {"lm-loss": 12.44238}  # "lm-loss: 1.244238E+01"
    assert first.loss == 12.44238
    assert (first.loss_scale, first.grad_norm, first.skipped_iterations) == (-1.0, 0.0, 0)
    assert its[-1].loss == 25.63856 and its[-1].lr == 1.5e-04

    mem = of(recs, MemoryRecord)
    assert len(mem) == 63  # 63 of the 64 ranks report "(after 1 iterations) memory (MB)"
    by_rank = {m.src.rank: m for m in mem}
    rank0 = by_rank[0]  # line 26
    assert rank0.label == "after 1 iterations" and rank0.step == 1
    assert rank0.allocated_bytes == round(12337.45654296875 * MIB)
    assert rank0.max_allocated_bytes == round(19961.072265625 * MIB)
    assert rank0.cached_bytes == rank0.max_cached_bytes == 22892 * MIB
    assert rank0.cpu_used_bytes is None  # Megatron prints no CPU figure
    assert by_rank[63].max_allocated_bytes == round(18175.37841796875 * MIB)

    (setup,) = of(recs, TimerRecord)  # line 1, Megatron's own set-up timers
    assert setup.group == "megatron"
    assert setup.values_ms == {
        "model-and-optimizer-setup": 2744.35,
        "train/valid/test-data-iterators-setup": 815.33,
    }


def test_07_bloom_line_wrapped_in_three_under_default7() -> None:
    recs, diag = parse_field(7)
    assert sum(diag.unparsed.values()) == 0 and sum(diag.cut.values()) == 0
    (it,) = of(recs, IterationRecord)
    assert (it.iteration, it.total_iterations) == (85376, 115311)
    assert (it.consumed_samples, it.consumed_tokens) == (158692272, 325001773056)
    assert it.elapsed_ms == pytest.approx(104700.0)  # "elapsed time per iteration (s): 104.70"
    assert it.lr == 1.150e-05 and it.global_batch_size == 2048
    assert it.loss == 1.979558 and it.grad_norm == 0.132
    assert (it.skipped_iterations, it.nan_iterations) == (0, 0)  # "number of sk" + "ipped ..."
    assert it.samples_per_s == 19.561
    assert it.flops_per_s_per_gpu == pytest.approx(149.77e12)  # "TFLOPs: 149.77"
    assert it.loss_scale is None  # BF16: no loss scale printed


def test_17_ezpz_key_value_lines_and_min_max_timer_blocks() -> None:
    recs, diag = parse_field(17)
    assert sum(diag.unparsed.values()) == 0
    its = of(recs, IterationRecord)
    assert [r.iteration for r in its] == [136004, 136005, 136006, 136007, 136008]
    it = its[0]
    assert it.ts == "2025-11-10T09:43:36.161"  # the ezpz header's own time
    assert it.total_iterations == 136100
    assert (it.consumed_samples, it.consumed_tokens) == (835608576, 6845305454592)
    assert it.elapsed_ms == 3415.3  # "elapsed_time_per_iteration_ms=3415.3"
    assert it.lr == 2.0127e-05 and it.global_batch_size == 6144
    assert it.losses == {"lm loss": 12.316531} and it.loss_scale == 1.0
    assert it.grad_norm == 1020.352 and it.actual_seqlen == 8192
    assert it.samples_per_s == 1798.971
    assert it.tokens_per_gpu_per_s == 4797.255  # "tokens_per_gpu_per_second_tgs=4797.255"
    assert it.flops_per_s_per_gpu == pytest.approx(53.66e12)
    assert its[2].elapsed_ms == 6863.2 and its[2].tokens_per_gpu_per_s == 2387.220

    blocks = [t for t in of(recs, TimerRecord) if t.group == "megatron"]
    assert [b.step for b in blocks] == [136004, 136005, 136006, 136007, 136008]
    assert blocks[0].values_ms == {"forward-backward": 3199.53, "optimizer": 166.36}
    assert blocks[0].min_values_ms == {"forward-backward": 3198.27, "optimizer": 158.53}
    assert blocks[2].values_ms["forward-backward"] == 6640.87

    engine = [t for t in of(recs, TimerRecord) if t.group == "global"]
    assert engine[0].values_ms == {
        "fwd": 715.40,
        "bwd": 2402.86,
        "bwd_inner": 1223.70,
        "bwd_allreduce": 1178.40,
        "step": 160.79,
    }
    assert engine[0].ts == "2025-11-10T09:43:36.149"  # the 4-space indent is taken off
    tput = of(recs, ThroughputRecord)
    assert [t.global_step for t in tput] == [5, 6, 7, 8, 9]  # the timer restarted on resume
    assert tput[0].samples_per_s == 2553.443452275532


def test_33_megatron_v115_lines_and_neox_style_timers() -> None:
    recs, diag = parse_field(33)
    assert sum(diag.unparsed.values()) == 0
    its = of(recs, IterationRecord)
    assert [(r.iteration, r.total_iterations) for r in its] == [(4, 4), (4, 4)]
    assert [r.elapsed_ms for r in its] == [298910.1, 338502.3]
    assert [r.loss for r in its] == [45.33051, 43.73392]
    assert its[0].lr == 1.451e-04 and its[0].loss_scale == 1024.0
    assert its[0].consumed_samples is None and its[0].global_batch_size is None
    timers = of(recs, TimerRecord)
    assert [t.group for t in timers] == ["megatron", "megatron"]  # not the engine's fwd/bwd
    assert timers[0].values_ms == {
        "forward": 53565.19,
        "backward": 152702.14,
        "backward-backward": 152702.08,
        "backward-allreduce": 0.00,
        "optimizer": 92637.16,
        "batch generator": 14.53,
    }


def test_47_checkpoint_save_timer_and_alerts() -> None:
    recs, diag = parse_field(47)
    assert sum(diag.unparsed.values()) == 0
    (it,) = of(recs, IterationRecord)
    assert (it.iteration, it.total_iterations, it.consumed_samples) == (33240, 311541, 15019344)
    assert it.elapsed_ms == 23491.4 and it.loss == 2.722675 and it.loss_scale == 32768.0
    (save,) = of(recs, TimerRecord)
    assert save.group == "megatron" and save.values_ms == {"save-checkpoint": 57514.53}
    # the "[2021-08-08 01:49:40] ***ALERT..." lines are the cluster's, not records
    assert all(r.ts is None or r.ts <= "2021-08-08T01:00:44.221" for r in recs)


def test_17_ezpz_line_with_a_label_split_by_re_wrapping() -> None:
    line = lines(17)[2]
    assert "learning_rate=2.0127e-05" in line
    recs, _ = parse_text(line.replace("learning_rate", "learning_ra" + " " * 14 + "te"))
    (it,) = of(recs, IterationRecord)
    assert it.lr == 2.0127e-05 and it.tokens_per_gpu_per_s == 4797.255
