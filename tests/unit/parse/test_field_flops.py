"""Flops-profiler output pasted by users (field corpus 02, 10, 35, 36, 48, 52, 53, 58).

Each excerpt goes through ``dsmon parse`` as a user would run it; the expected values are read
off the excerpt by hand (the line quoted in the comment). Cut excerpts keep what they printed,
flagged ``partial``; a figure the excerpt never reached stays None.
"""

from __future__ import annotations

import pytest
from field_corpus import dsmon_parse

from dsmon.model.records import FlopsProfileRecord, ModuleAggregate, ModuleProfile, TimerRecord


def module(rec: FlopsProfileRecord, path: str) -> ModuleProfile:
    (found,) = [m for m in rec.modules if m.path == path]
    return found


def top(rec: FlopsProfileRecord, depth: int, metric: str) -> dict[str, float | None]:
    return {
        a.module_class: a.value for a in rec.top_modules if (a.depth, a.metric) == (depth, metric)
    }


def test_02_engine_profile_of_a_cnn_on_16_gpus() -> None:
    parsed = dsmon_parse(2)
    rec = parsed.one(FlopsProfileRecord)
    assert not rec.partial
    assert rec.profile_step == 2  # "Profile Summary at step 2:"
    assert (rec.world_size, rec.data_parallel_size, rec.model_parallel_size) == (16, 16, 1)
    assert rec.batch_size_per_gpu == 1  # "1       " ({:<8} padding)
    assert rec.params_per_gpu == rec.params_total == 166.46e3  # "166.46 k"
    assert rec.fwd_macs_per_gpu == 2.81e9  # "2.81 GMACs"
    assert rec.fwd_flops_per_gpu == rec.fwd_flops_total == 5.64e9  # "5.64 G  "
    assert rec.fwd_latency_ms == 7.48
    assert rec.fwd_flops_per_s_per_gpu == 753.8e9
    assert rec.bwd_latency_ms == 10.57
    assert rec.bwd_flops_per_s_per_gpu == 1.07e12  # "1.07 TFLOPS"
    assert rec.fwd_bwd_flops_per_s_per_gpu == 937.38e9
    assert rec.step_latency_ms == pytest.approx(0.69414)  # "694.14 us"
    assert rec.iter_latency_ms == 18.75
    assert rec.flops_per_s_per_gpu == 902.67e9
    assert rec.samples_per_s == 853.56
    assert rec.bwd_factor == 2.0  # "bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency"
    assert rec.width == 60
    assert top(rec, 0, "fwd_latency") == {"Net": 7.41}
    assert top(rec, 1, "macs") == {"ModuleList": 2.81e9}
    assert [m.path for m in rec.modules] == ["", "activation_fn", "layers"] + [
        f"layers.{i}" for i in range(9)
    ]
    linear = module(rec, "layers.6")
    assert (linear.module_class, linear.params, linear.macs) == ("Linear", 147.47e3, 37.75e6)
    assert (linear.fwd_latency_ms, linear.fwd_latency_pct) == (6.12, 82.66)
    assert linear.fwd_flops_per_s == 12.33e9
    assert linear.extra == "in_features=9216, out_features=16, bias=True"
    assert module(rec, "layers.8").macs == 40.96e3  # "40.96 KMACs"
    # the old-name timer lines after the closing dashes are read too
    micro, total = parsed.of(TimerRecord)
    assert micro.values_ms["fwd_microstep"] == 7.48 and micro.legacy
    assert total.values_ms["bwd"] == 0.0
    assert "cut blocks" in parsed.report and ", 0 cut blocks" in parsed.report


def test_10_megatron_gpt2_tutorial_latencies_in_seconds() -> None:
    rec = dsmon_parse(10).one(FlopsProfileRecord)
    assert not rec.partial and rec.profile_step == 10
    assert rec.batch_size_per_gpu == 1024
    assert rec.params_per_gpu == 1.29e6  # "1.29 M"
    assert rec.fwd_macs_per_gpu == 41271.95e9  # "41271.95 G", MACs with no unit word
    assert rec.fwd_flops_per_gpu == 82543.9e9
    assert rec.fwd_latency_ms == 1890.0  # "1.89 s"
    assert rec.bwd_latency_ms == 5380.0
    assert rec.step_latency_ms == 34120.0  # "34.12 s"
    assert rec.iter_latency_ms == 41390.0
    assert rec.fwd_flops_per_s_per_gpu == 43.68e12
    assert rec.bwd_flops_per_s_per_gpu == 30.7e12
    assert rec.fwd_bwd_flops_per_s_per_gpu == 34.07e12
    assert rec.flops_per_s_per_gpu is None  # this version printed no iter FLOPS line
    assert rec.samples_per_s == 24.74
    assert top(rec, 4, "params") == {"ParallelTransformerLayerPart2": 688.15e3}
    assert top(rec, 5, "fwd_latency") == {"ParallelMLP": 849.4}
    assert top(rec, 0, "fwd_latency") == {"GPT2Model": 1840.0}  # "1.84 s"
    qkv = module(rec, "language_model.transformer.layers.0.attention.query_key_value")
    assert (qkv.module_class, qkv.params, qkv.fwd_flops_per_s) == (
        "ColumnParallelLinear",
        24.58e3,
        184.7e12,
    )
    elided = module(rec, "language_model.transformer.layers.23")
    assert elided.extra == "..." and elided.params is None  # "(23): ...Part2(...)"
    assert module(rec, "language_model.transformer.final_layernorm").fwd_latency_ms == 0.11086


def test_35_forward_only_profile_cut_inside_the_tree() -> None:
    parsed = dsmon_parse(35)
    rec = parsed.one(FlopsProfileRecord)
    assert rec.partial  # the paste stops after BertEmbeddings' closing ")"
    assert "cut flops_profile: 1" in parsed.report
    assert rec.profile_step == 10
    # get_model_profile prints no engine lines: world size, bwd and iter stay unknown
    assert rec.world_size is None and rec.bwd_latency_ms is None and rec.iter_latency_ms is None
    assert rec.params_per_gpu == 109.48e6
    assert rec.fwd_macs_per_gpu == 96.64e9
    assert rec.fwd_flops_per_gpu == 193.45e9
    assert rec.fwd_latency_ms == 297.4
    assert rec.fwd_flops_per_s_per_gpu == 650.47e9
    assert len(rec.top_modules) == 21  # depths 0-6, one class per metric
    assert top(rec, 6, "params") == {"Linear": 56.67e6}
    assert top(rec, 6, "fwd_latency") == {"BertSelfAttention": 175.64}
    assert [m.path for m in rec.modules] == [
        "",
        "bert",
        "bert.embeddings",
        "bert.embeddings.word_embeddings",
        "bert.embeddings.position_embeddings",
        "bert.embeddings.token_type_embeddings",
        "bert.embeddings.LayerNorm",
        "bert.embeddings.dropout",
    ]
    norm = module(rec, "bert.embeddings.LayerNorm")
    assert (norm.params, norm.fwd_latency_ms, norm.fwd_flops_per_s) == (1.54e3, 0.24295, 16.19e9)
    assert norm.extra == "(768,), eps=1e-12, elementwise_affine=True"


def test_36_summary_head_of_16_a100s_cut_before_latencies() -> None:
    parsed = dsmon_parse(36)
    rec = parsed.one(FlopsProfileRecord)
    assert rec.partial and rec.profile_step == 21
    assert (rec.world_size, rec.data_parallel_size, rec.model_parallel_size) == (16, 16, 1)
    assert rec.batch_size_per_gpu == 2
    assert rec.params_per_gpu == rec.params_total == 1575.59e6  # "1575.59 M"
    assert rec.fwd_macs_per_gpu == 6453.19e9  # "6453.19 GMACs"
    assert rec.fwd_flops_per_gpu == 12906.92e9  # "12906.92 G", the last line
    assert rec.fwd_flops_total is None and rec.fwd_latency_ms is None
    assert rec.top_modules == () and rec.modules == ()


def test_48_readme_bert_large_top3_aggregated() -> None:
    rec = dsmon_parse(48).one(FlopsProfileRecord)
    assert not rec.partial
    assert rec.batch_size_per_gpu == 80
    assert rec.params_per_gpu == 336.23e6
    assert rec.fwd_latency_ms == 76.67 and rec.bwd_latency_ms == 108.02
    assert rec.step_latency_ms == pytest.approx(0.03409)  # "34.09 us"
    assert rec.iter_latency_ms == 184.73
    assert rec.fwd_bwd_flops_per_s_per_gpu == 102.0e12
    assert rec.samples_per_s == 433.07
    assert top(rec, 1, "params") == {"BertModel": 335.15e6, "BertPreTrainingHeads": 32.34e6}
    assert top(rec, 3, "params") == {
        "ModuleList": 302.31e6,
        "Embedding": 31.79e6,
        "Linear": 31.26e6,
    }
    # "{'ModuleList': '33.11 ms', 'BertPredictionHeadTransform': '1.83 ms''}": the stray quote
    assert top(rec, 3, "fwd_latency") == {"ModuleList": 33.11, "BertPredictionHeadTransform": 1.83}
    assert rec.top_modules[0] == ModuleAggregate(
        depth=0, metric="params", module_class="BertForPreTrainingPreLN", value=336.23e6
    )
    query = module(rec, "bert.encoder.layer.0.attention.self.query")
    assert (query.params, query.fwd_latency_ms, query.fwd_flops_per_s) == (
        1.05e6,
        0.18239,
        117.74e12,
    )
    assert module(rec, "bert.embeddings").extra == "..."  # "(embeddings): BertEmbeddings(...)"


def test_52_model_parallel_8_summary_head() -> None:
    rec = dsmon_parse(52).one(FlopsProfileRecord)
    assert rec.partial and rec.profile_step == 4
    assert (rec.world_size, rec.data_parallel_size, rec.model_parallel_size) == (16, 2, 8)
    assert rec.batch_size_per_gpu == 35
    assert rec.params_per_gpu is None  # the paste ends before "params per gpu:"


def test_53_resnet18_complete_forward_only_tree() -> None:
    rec = dsmon_parse(53).one(FlopsProfileRecord)
    assert not rec.partial and rec.profile_step == 10
    assert rec.params_per_gpu == 11.69e6  # "11.69 M " with a trailing space
    assert rec.fwd_macs_per_gpu == 29.03e9
    assert rec.fwd_flops_per_gpu == 58.18e9
    assert rec.fwd_latency_ms == 76.73
    assert rec.fwd_flops_per_s_per_gpu == 758.27e9
    assert rec.samples_per_s is None and rec.world_size is None
    assert top(rec, 3, "macs") == {"Conv2d": 26.82e9}
    # ResNet + 4 stem modules + 4 stages x 2 blocks x 5 + 3 downsample x 3 + 4 stages + 8 blocks
    # + avgpool + fc
    assert len(rec.modules) == 68
    down = module(rec, "layer4.0.downsample.0")
    assert (down.module_class, down.depth, down.params, down.macs) == (
        "Conv2d",
        4,
        131.07e3,
        102.76e6,
    )
    assert (down.fwd_latency_ms, down.fwd_flops_per_s) == (0.69904, 294.0e9)
    assert module(rec, "layer4").fwd_flops_per_s == 1.04e12  # "1.04 TFLOPS"
    fc = module(rec, "fc")
    assert (fc.params, fc.macs, fc.fwd_latency_pct) == (513.0e3, 8.19e6, 0.44)


def test_58_terminal_padded_header_keeps_its_step() -> None:
    parsed = dsmon_parse(58)
    rec = parsed.one(FlopsProfileRecord)
    # lines padded to 135 columns, the blank line joined onto the notation paragraph:
    # only "Profile Summary at step 1:" was printed before the paste ends
    assert rec.partial and rec.profile_step == 1
    assert rec.params_per_gpu is None and rec.top_modules == () and rec.modules == ()
    assert "0 unparsed lines" in parsed.report
