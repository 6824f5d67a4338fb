"""FlopsProfilerParser and parse_profile_file on real flops-profiler output.

Expected values are read by hand from the files under tests/data/ (each folder has a README.md
naming its source). Tests that reshape a real file (prefix every line, drop a line, wrap one)
say so in their docstring; the lines themselves are never invented.
"""

from __future__ import annotations

import dataclasses

import pytest
from locations import DATA

from dsmon.model.records import (
    EventRecord,
    FlopsProfileRecord,
    ModuleAggregate,
    ModuleProfile,
    Record,
)
from dsmon.parse.base import OUT_OF_RANGE, Diagnostics
from dsmon.parse.families.flops_profiler import FlopsProfilerParser
from dsmon.parse.log import LogParser, parse_text
from dsmon.parse.side_files import parse_profile_file
from dsmon.parse.unparsed import UNPARSED


def parse_lines(lines: list[str], file: str = "train.log") -> tuple[list[Record], Diagnostics]:
    """Run the log parser with only the flops parser, as the orchestrator would.

    The parser's ``unparsed`` events are left out: ``diag`` holds what they tell.
    """
    parser = LogParser("run", file, parsers=[FlopsProfilerParser()])
    recs = parser.feed_lines(lines)
    told = [r for r in recs if not (isinstance(r, EventRecord) and r.name == UNPARSED)]
    return told, parser.diag


def parse_log(rel: str) -> tuple[list[FlopsProfileRecord], Diagnostics]:
    recs, diag = parse_lines((DATA / rel).read_text().splitlines(), rel)
    flops = [r for r in recs if isinstance(r, FlopsProfileRecord)]
    assert len(flops) == len(recs)
    return flops, diag


def module(rec: FlopsProfileRecord, path: str) -> ModuleProfile:
    (found,) = [m for m in rec.modules if m.path == path]
    return found


def without_position(rec: FlopsProfileRecord) -> FlopsProfileRecord:
    return dataclasses.replace(rec, src=dataclasses.replace(rec.src, line=None, node=None))


# --- v0.10.1+ summary (corpus, DeepSpeed 0.19.8) -----------------------------------------------


def test_z0_summary_every_label() -> None:
    (rec,), diag = parse_log("flops_z0/train.log")
    assert rec.src.line == 187  # the "DeepSpeed Flops Profiler" title line
    assert rec.ts == "2026-11-29T14:10:24.380"  # "Flops profiler started", the last stamped line
    assert rec.profile_step == 6
    assert (rec.world_size, rec.data_parallel_size, rec.model_parallel_size) == (2, 2, 1)
    assert rec.batch_size_per_gpu == 4
    assert rec.params_per_gpu == 932610.0  # 932.61 K
    assert rec.params_total == 932610.0
    assert rec.fwd_macs_per_gpu == 234.88e6  # 234.88 MMACs
    assert rec.fwd_flops_per_gpu == 471.76e6  # 471.76 M
    assert rec.fwd_flops_total == 471.76e6
    assert rec.fwd_latency_ms == 34.92
    assert rec.fwd_flops_per_s_per_gpu == 13.51e9
    assert rec.bwd_latency_ms == 28.95
    assert rec.bwd_flops_per_s_per_gpu == 32.59e9
    assert rec.fwd_bwd_flops_per_s_per_gpu == 22.16e9
    assert rec.step_latency_ms == 31.75
    assert rec.iter_latency_ms == 95.62
    assert rec.flops_per_s_per_gpu == 14.8e9
    assert rec.samples_per_s == 83.67
    assert rec.bwd_factor == 2.0  # "bwd FLOPS per GPU = 2 * fwd flops ..."
    assert rec.width == 70
    assert rec.extra == {}
    assert rec.modules == ()  # detailed: false
    assert diag.unparsed == {} and diag.cut == {}


def test_z0_aggregated_top_modules() -> None:
    (rec,), _ = parse_log("flops_z0/train.log")
    assert len(rec.top_modules) == 24  # depths 0-3: 1 + 3 + 1 + 3 classes, three metrics each
    assert rec.top_modules[0] == ModuleAggregate(
        depth=0, metric="params", module_class="TinyGPT", value=932610.0
    )
    # "fwd latency - {'TinyGPT': '1.8 Gs'}": the profiler's bogus figure, kept as printed
    assert (
        ModuleAggregate(depth=0, metric="fwd_latency", module_class="TinyGPT", value=1.8e12)
        in rec.top_modules
    )
    depth3_latency = [(a.module_class, a.value) for a in rec.top_modules if a.depth == 3][6:]
    assert depth3_latency == [
        ("MultiheadAttention", 17.9),
        ("Sequential", 14.81),
        ("LayerNorm", 0.49329),  # 493.29 us
    ]
    macs1 = [
        (a.module_class, a.value) for a in rec.top_modules if (a.depth, a.metric) == (1, "macs")
    ]
    assert macs1 == [("ModuleList", 218.1e6), ("Linear", 16.78e6), ("Embedding", 0.0)]


def test_z2_summary() -> None:
    (rec,), diag = parse_log("z2/train.log")
    assert rec.src.line == 207
    assert rec.fwd_latency_ms == 12.23
    assert rec.step_latency_ms == 9.74  # "9.74 ms " padded to eight characters
    assert rec.samples_per_s == 158.56
    assert rec.fwd_bwd_flops_per_s_per_gpu == 34.76e9
    assert diag.cut == {}


def test_z3_doubles_macs() -> None:
    (rec,), _ = parse_log("z3/train.log")
    assert rec.src.line == 214
    assert rec.fwd_macs_per_gpu == 452.98e6
    assert rec.fwd_flops_per_gpu == 907.97e6
    assert rec.bwd_latency_ms == 39.73
    assert rec.flops_per_s_per_gpu == 26.95e9


def test_grad_accum_prints_one_block_per_micro_step() -> None:
    recs, diag = parse_log("grad_accum/train.log")
    assert [r.profile_step for r in recs] == [5, 5, 5, 6]
    assert [r.fwd_latency_ms for r in recs] == [7.35, 15.07, 22.42, 29.89]
    assert [r.src.line for r in recs] == [221, 272, 323, 375]
    assert recs[0].step_latency_ms == 0.01335  # 13.35 us
    assert recs[0].batch_size_per_gpu == 2
    assert recs[3].samples_per_s == 32.6
    assert diag.cut == {}


# --- detailed tree ----------------------------------------------------------------------------


def test_detailed_tree_on_stdout() -> None:
    (rec,), diag = parse_log("flops_detailed_stdout/train.log")
    assert rec.profile_step == 4
    assert len(rec.top_modules) == 9  # module_depth 2: depths 0 and 1, top 2
    assert len(rec.modules) == 42
    root = rec.modules[0]
    assert (root.path, root.module_class, root.depth) == ("", "TinyGPT", 0)
    assert (root.params, root.macs, root.fwd_flops_per_s) == (932610.0, 234.88e6, 0.26)
    assert root.fwd_latency_ms is None  # DeepSpeed printed "1.8 Gs" (57 years): left out
    assert module(rec, "blocks") == ModuleProfile(path="blocks", module_class="ModuleList", depth=1)
    gelu = module(rec, "blocks.0.mlp.1")
    assert gelu == ModuleProfile(
        path="blocks.0.mlp.1",
        module_class="GELU",
        depth=4,
        params=0.0,
        params_pct=0.0,
        macs=0.0,
        macs_pct=0.0,
        fwd_latency_ms=0.13971,
        fwd_latency_pct=0.0,
        fwd_flops_per_s=938.15e6,
        extra="approximate='none'",
    )
    mlp = module(rec, "blocks.2.mlp")  # numbers on the line under "(mlp): Sequential("
    assert (mlp.params, mlp.macs_pct, mlp.fwd_latency_ms) == (131710.0, 14.29, 0.55528)
    head = module(rec, "head")
    assert head.depth == 1 and head.extra == "in_features=128, out_features=512, bias=False"
    assert module(rec, "blocks.3.attn.out_proj").depth == 4
    assert diag.unparsed == {OUT_OF_RANGE: 1}  # the root's "1.8 Gs"


def test_output_file_is_parsed_whole() -> None:
    text = (DATA / "flops_detailed_file/flops_profile.txt").read_text()
    (rec,), diag = parse_profile_file(text, "run", "flops_profile.txt", node="n1")
    assert diag.unparsed == {OUT_OF_RANGE: 1}  # the root's "1.8 Gs" latency, left out
    assert (rec.src.file, rec.src.line, rec.src.offset, rec.src.node) == (
        "flops_profile.txt",
        2,
        None,
        "n1",
    )
    assert rec.src.sub == 6 and rec.step == 6  # keyed by the profile step: the file is rewritten
    assert rec.fwd_latency_ms == 11.62
    assert rec.bwd_latency_ms == 28.6  # "28.6 ms "
    assert rec.samples_per_s == 148.17
    assert len(rec.modules) == 42
    assert module(rec, "tok").fwd_latency_ms == 0.09608
    assert diag.records == 2 and diag.cut == {}  # with the event telling the value left out


def test_log_of_output_file_run_has_no_block() -> None:
    recs, diag = parse_log("flops_detailed_file/train.log")
    assert recs == [] and diag.cut == {}


def test_output_file_caught_mid_write_is_partial_and_keyed_apart() -> None:
    """The collector may read the file while DeepSpeed writes it: first 40 lines only."""
    text = (DATA / "flops_detailed_file/flops_profile.txt").read_text()
    head = "\n".join(text.splitlines()[:40])
    (cut,), diag = parse_profile_file(head, "run", "flops_profile.txt")
    (whole,), _ = parse_profile_file(text, "run", "flops_profile.txt")
    assert diag.cut == {"flops_profile": 1}
    assert cut.partial and not whole.partial
    assert cut.fwd_latency_ms == whole.fwd_latency_ms == 11.62
    assert cut.samples_per_s == whole.samples_per_s == 148.17
    assert cut.top_modules == whole.top_modules[: len(cut.top_modules)]
    assert cut.top_modules[-1].module_class == "Embedding"  # depth 1, the last row read
    assert cut.modules == ()
    # the complete re-read is a different record, so the store keeps it beside the cut one
    assert (cut.src.sub, whole.src.sub) == (-7, 6) and cut.step == whole.step == 6


# --- pre-v0.10.1 layout and odd values (external sources, see the READMEs) -------------------


def test_v080_sixty_column_layout_and_old_module_form() -> None:
    text = (DATA / "flops_v080_resnet18/profile.txt").read_text()
    (rec,), diag = parse_profile_file(text, "run", "profile.txt")
    assert rec.width == 60
    assert rec.world_size is None and rec.bwd_latency_ms is None and rec.bwd_factor is None
    assert rec.params_per_gpu == 11.69e6  # "params per gpu:" in lower case
    assert rec.fwd_macs_per_gpu == 29.03e9
    assert rec.fwd_latency_ms == 76.73
    assert rec.fwd_flops_per_s_per_gpu == 758.27e9
    assert len(rec.top_modules) == 12
    assert len(rec.modules) == 68
    assert module(rec, "conv1") == ModuleProfile(
        path="conv1",
        module_class="Conv2d",
        depth=1,
        params=9410.0,  # "9.41 k"
        params_pct=0.08,
        macs=1.89e9,
        macs_pct=6.51,
        fwd_latency_ms=10.17,
        fwd_latency_pct=13.25,
        fwd_flops_per_s=371.35e9,
        extra="3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False",
    )
    layer1 = module(rec, "layer1")  # container numbers on the next line, ending in ", "
    assert (layer1.params, layer1.fwd_latency_pct, layer1.extra) == (147970.0, 29.4, None)
    down = module(rec, "layer4.0.downsample.1")
    assert (down.depth, down.params, down.fwd_latency_ms) == (4, 1020.0, 0.10657)
    assert module(rec, "fc").params == 513000.0
    assert diag.unparsed == {}


def test_v0x_readme_engine_fields_in_sixty_columns() -> None:
    text = (DATA / "flops_v0x_readme_megatron/profile.txt").read_text()
    (rec,), diag = parse_profile_file(text, "run", "profile.txt")
    assert rec.width == 60
    assert (rec.world_size, rec.batch_size_per_gpu) == (1, 1024)
    assert rec.params_per_gpu == 1.29e6
    assert rec.fwd_macs_per_gpu == 41271.95e9  # "41271.95 G": no MACs word in this version
    assert rec.fwd_latency_ms == 1890.0
    assert rec.bwd_latency_ms == 5380.0
    assert rec.bwd_flops_per_s_per_gpu == 30.7e12
    assert rec.fwd_bwd_flops_per_s_per_gpu == 34.07e12  # label wider than the column
    assert rec.step_latency_ms == 34120.0
    assert rec.iter_latency_ms == 41390.0
    assert rec.flops_per_s_per_gpu is None  # no such line before v0.10.1
    assert rec.samples_per_s == 24.74
    assert rec.bwd_factor == 2.0
    assert module(rec, "language_model.transformer.layers.0.attention.dense").params == 8190.0
    elided = module(rec, "language_model.transformer.layers.23")
    assert (elided.params, elided.extra) == (None, "...")
    assert diag.unparsed == {}


def test_exponent_values_and_a_clipped_tree() -> None:
    (rec,), diag = parse_log("flops_auroragpt_exponents/train.log")
    assert rec.ts == "2024-04-19T13:30:54.278"
    assert rec.world_size == 24
    assert rec.params_per_gpu == 2.39e9  # "2.39 B"
    assert rec.fwd_macs_per_gpu == 55.48e12
    assert rec.fwd_latency_ms == 9340.0
    assert rec.bwd_latency_ms is None  # "-2.9601e+08 us": no duration, left out (counted)
    assert rec.bwd_flops_per_s_per_gpu == -7.49758e11  # "-7.49758e+17 uFLOPS"
    assert rec.fwd_bwd_flops_per_s_per_gpu == -1.16128e12
    assert rec.iter_latency_ms is None  # "-2.86511e+08 us"
    assert rec.flops_per_s_per_gpu == -1.16192e12
    assert rec.samples_per_s == -0.5
    assert rec.modules[0].fwd_flops_per_s == 95.06e12
    assert len(rec.modules) == 10  # the author's "# ...clipped..." line is skipped
    assert module(rec, "language_model.output_layer").fwd_latency_ms == 0.0
    assert diag.unparsed == {OUT_OF_RANGE: 2} and diag.cut == {}  # the two negative latencies


def test_v03_forward_pass_summary_and_one_line_aggregates() -> None:
    """The earliest layout: ``Summary of forward pass:`` and ``Top 3 modules in MACs at ...``."""
    text = (DATA / "flops_v03_tutorial_lenet/profile.txt").read_text()
    (rec,), diag = parse_profile_file(text, "run", "profile.txt")
    assert not rec.partial and rec.profile_step == 1  # "Profile step:                   1"
    assert rec.params_per_gpu == 61.71e3  # "Number of parameters:           61.71 k"
    assert rec.fwd_macs_per_gpu == 439.56e6  # "...operations (MACs):   439.56 M"
    assert rec.fwd_flops_per_gpu == 879.12e6  # "( = 2 * MACs):   879.12 M"
    assert rec.fwd_latency_ms == 25.7  # "Latency:                        25.7 ms"
    assert rec.fwd_flops_per_s_per_gpu == 34.2e9  # "...per second(FLOPS):   34.2 GFLOPS"
    assert rec.bwd_factor is None and rec.width == 30
    assert [(a.depth, a.metric, a.module_class, a.value) for a in rec.top_modules] == [
        (2, "macs", "Conv2d", 421.91e6),
        (2, "macs", "Linear", 11.18e6),
        (2, "macs", "AvgPool2d", 6.46e6),
        (2, "params", "Conv2d", 50.69e3),
        (2, "params", "Linear", 11.01e3),
        (2, "params", "Tanh", 0.0),
        (2, "fwd_latency", "Conv2d", 11.37),
        (2, "fwd_latency", "Linear", 5.27),
        (2, "fwd_latency", "AvgPool2d", 5.02),
    ]
    assert len(rec.modules) == 14  # LeNet5, 2 Sequentials, 8 + 3 layers
    conv = module(rec, "feature_extractor.3")
    assert (conv.params, conv.macs, conv.fwd_latency_ms) == (2.42e3, 247.4e6, 0.92483)
    assert (conv.fwd_flops_per_s, conv.extra) == (
        535.02e9,
        "6, 16, kernel_size=(5, 5), stride=(1, 1)",
    )
    assert module(rec, "classifier.2").fwd_flops_per_s == 613.62e6  # "613.62 MFLOPS"
    assert diag.unparsed == {} and diag.cut == {}


def test_summary_labels_are_read_with_any_spacing() -> None:
    """flops_z0's block as a paste that collapsed every run of spaces to one."""
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    (clean,), _ = parse_lines(lines)
    collapsed = [" ".join(ln.split()) if not ln.startswith("[") else ln for ln in lines]
    (rec,), diag = parse_lines(collapsed)
    assert isinstance(rec, FlopsProfileRecord) and isinstance(clean, FlopsProfileRecord)
    assert dataclasses.replace(rec, width=None, modules=clean.modules) == dataclasses.replace(
        clean, width=None
    )
    assert rec.samples_per_s == 83.67 and rec.fwd_bwd_flops_per_s_per_gpu == 22.16e9
    assert diag.cut == {}


def test_srun_label_on_every_line_changes_nothing() -> None:
    """flops_z0 as ``srun --label`` shows it: ``0: `` before every line."""
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    (clean,), _ = parse_lines(lines)
    (rec,), diag = parse_lines([f"0: {ln}" for ln in lines])
    assert isinstance(rec, FlopsProfileRecord) and isinstance(clean, FlopsProfileRecord)
    assert without_position(rec) == without_position(clean)
    assert diag.unparsed == {} and diag.cut == {}


def test_per_device_wording_reads_as_per_gpu() -> None:
    """flops_detailed_stdout with the accelerator-neutral titles and labels some builds print
    (``Aggregated Profile per device``, ``params per device``): the same record, not a cut one."""
    lines = (DATA / "flops_detailed_stdout/train.log").read_text().splitlines()
    (clean,), clean_diag = parse_lines(lines)
    (rec,), diag = parse_lines([ln.replace("per GPU", "per device") for ln in lines])
    assert any("Aggregated Profile per GPU" in ln for ln in lines)
    assert isinstance(rec, FlopsProfileRecord) and isinstance(clean, FlopsProfileRecord)
    assert not rec.partial and len(rec.top_modules) == 9 and len(rec.modules) == 42
    assert without_position(rec) == without_position(clean)
    # the root's "1.8 Gs" fwd latency is left out in both: nothing else is lost or cut
    assert diag.unparsed == clean_diag.unparsed == {OUT_OF_RANGE: 1} and diag.cut == {}


# --- noise, cuts and damage ------------------------------------------------------------------


def test_launcher_prefix_and_interleaved_lines_change_nothing() -> None:
    """z0 as pdsh shows it (``worker-0: `` on every line) with real lines of the other rank and
    of the training script spliced into the summary, the aggregated section and the block end."""
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    # a rank-1 logger line, a line of the training script, a bare print() of an extension build
    intruders = {205: lines[20], 225: lines[183], 232: lines[15]}
    assert "Config mesh_device" in lines[20] and "built successfully" in lines[15]
    mixed: list[str] = []
    for number, text in enumerate(lines, start=1):
        mixed.append(f"worker-0: {text}")
        if number in intruders:
            mixed.append(f"worker-1: {intruders[number]}")
    (clean,), _ = parse_log("flops_z0/train.log")
    recs, diag = parse_lines(mixed, "flops_z0/train.log")
    (rec,) = recs
    assert isinstance(rec, FlopsProfileRecord)
    assert rec.src.node == "worker-0"
    assert without_position(rec) == without_position(clean)
    assert diag.unparsed == {} and diag.cut == {}


def test_block_without_its_end_is_partial_and_the_next_one_kept() -> None:
    """grad_accum with the closing dashed line of its first block removed (line 267)."""
    lines = (DATA / "grad_accum/train.log").read_text().splitlines()
    assert lines[266].startswith("-" * 78)
    recs, diag = parse_lines(lines[:266] + lines[267:])
    (whole, *_), _ = parse_lines(lines)
    assert [r.src.line for r in recs] == [221, 271, 322, 374]
    assert [isinstance(r, FlopsProfileRecord) and r.partial for r in recs] == [True] + [False] * 3
    # nothing was lost but the footer: the cut block holds what the whole one does
    assert dataclasses.replace(recs[0], partial=False) == whole
    assert diag.cut == {"flops_profile": 1}
    assert diag.examples["flops_profile"] == [
        "train.log:271: -------------------------- DeepSpeed Flops Profiler ------------------"
        "--------"
    ]


def test_log_ending_inside_a_block_keeps_what_was_read() -> None:
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    (rec,), diag = parse_lines(lines[:225])  # stops in the aggregated section
    assert isinstance(rec, FlopsProfileRecord) and rec.partial
    assert rec.samples_per_s == 83.67 and rec.fwd_latency_ms == 34.92
    assert [(a.depth, a.metric) for a in rec.top_modules][-1] == (1, "fwd_latency")  # line 224
    assert diag.cut == {"flops_profile": 1}


def test_unreadable_value_is_counted_and_named() -> None:
    """z0 with the fwd-latency value damaged; the rest of the block still parses."""
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    assert lines[204].endswith("34.92 ms")
    lines[204] = lines[204].replace("34.92 ms", "34.92 parsecs")
    parser = LogParser("run", "train.log", parsers=[FlopsProfilerParser()])
    told, rec = parser.feed_lines(lines)
    diag = parser.diag
    assert isinstance(rec, FlopsProfileRecord)
    assert isinstance(told, EventRecord) and told.detail["kind"] == "flops_profile"
    assert rec.fwd_latency_ms is None
    assert rec.bwd_latency_ms == 28.95
    assert diag.unparsed == {"flops_profile": 1}
    assert diag.examples["flops_profile"][0].startswith("train.log:205: field 'fwd latency': ")


def test_a_block_printed_again_reads_alike_and_counts_its_unreadable_entries_again() -> None:
    """z0's block three times, an aggregated entry damaged in the first and the last: the
    parser keeps the entries it read for the next block, and a damaged one is counted at
    each line that prints it, never taken from the block before."""
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if "Flops Profiler ---" in ln)
    last = next(i for i in range(len(lines) - 1, first, -1) if lines[i].startswith("-----"))
    block = lines[first : last + 1]
    damaged = [ln.replace("{'TinyGPT': '932.61 K'}", "{'TinyGPT': '932.61 Q'}") for ln in block]
    assert damaged != block
    recs, diag = parse_lines(damaged + block + damaged)
    one, two, three = recs
    assert isinstance(one, FlopsProfileRecord) and isinstance(two, FlopsProfileRecord)
    assert two.top_modules == parse_log("flops_z0/train.log")[0][0].top_modules
    assert one.top_modules[0].value is None and two.top_modules[0].value == 932610.0
    assert three == dataclasses.replace(one, src=three.src)
    assert diag.unparsed == {"flops_profile": 2}
    where = [e.split(": field")[0] for e in diag.examples["flops_profile"]]
    at = next(i for i, ln in enumerate(block) if "'932.61 K'" in ln) + 1
    assert where == [f"train.log:{at}", f"train.log:{at + 2 * len(block)}"]


def test_leaf_line_wrapped_by_the_terminal_is_joined() -> None:
    """flops_detailed_stdout with the long ``(ln1): LayerNorm(...)`` line cut at column 80."""
    lines = (DATA / "flops_detailed_stdout/train.log").read_text().splitlines()
    index = next(i for i, t in enumerate(lines) if t.startswith("      (ln1): LayerNorm("))
    wrapped = lines[:index] + [lines[index][:80], lines[index][80:]] + lines[index + 1 :]
    (clean,), _ = parse_log("flops_detailed_stdout/train.log")
    (rec,), diag = parse_lines(wrapped)
    assert isinstance(rec, FlopsProfileRecord)
    assert rec.modules == clean.modules
    assert module(rec, "blocks.0.ln1").fwd_flops_per_s == 111.12e6


@pytest.mark.parametrize("cut", [1, 9, 30, 47, 60])
def test_any_prefix_of_a_block_is_partial(cut: int) -> None:
    lines = (DATA / "flops_detailed_stdout/train.log").read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if "DeepSpeed Flops Profiler ---" in t)
    recs, diag = parse_lines(lines[: start + cut])
    assert diag.cut == {"flops_profile": 1}
    if cut == 1:
        assert recs == []  # the title alone: nothing was measured yet
    else:
        (rec,) = recs
        assert isinstance(rec, FlopsProfileRecord) and rec.partial


def test_with_every_parser_the_block_gets_its_optimizer_step() -> None:
    """The whole pipeline: the other parsers leave the block alone, and the step clock (engine
    global timer lines) files it under step 6, the step whose forward it profiled."""
    recs, diag = parse_text((DATA / "flops_z0/train.log").read_text(), "run", "flops_z0/train.log")
    (rec,) = [r for r in recs if isinstance(r, FlopsProfileRecord)]
    (alone,), _ = parse_log("flops_z0/train.log")
    assert rec.step == 6
    assert dataclasses.replace(rec, step=None) == dataclasses.replace(alone, step=None)
    assert "flops_profile" not in diag.cut


def test_moe_labels_in_deepspeeds_layout() -> None:
    """No real MoE summary was found to copy, so the MoE lines are rendered with DeepSpeed's own
    ``line_fmt = '{:<70}  {:<8}'`` (profiler.py, print_model_profile) in place of z0's
    ``params of model = ...`` line; the rest of the block is z0's."""
    lines = (DATA / "flops_z0/train.log").read_text().splitlines()
    line_fmt = "{:<70}  {:<8}"
    moe = [
        line_fmt.format("expert tensor parallelism enabled: ", False),
        line_fmt.format("params of model: ", "1.93 M"),
        line_fmt.format("   non-expert params of model: ", "932.61 K"),
        line_fmt.format("   expert params of model: ", "1 M"),
    ]
    assert lines[200].startswith("params of model = params per GPU * mp_size:")
    (rec,), diag = parse_lines(lines[:200] + moe + lines[201:])
    assert isinstance(rec, FlopsProfileRecord)
    assert rec.params_total == 1.93e6
    assert rec.extra == {
        "expert tensor parallelism enabled": "0",  # format(False, "<8") is "0       "
        "non-expert params of model": "932.61 K",
        "expert params of model": "1 M",
    }
    assert rec.fwd_macs_per_gpu == 234.88e6
    assert diag.unparsed == {}


def test_aggregated_depths_without_entries() -> None:
    """ZeRO-3 can print ``depth N:`` with nothing under it: z3 with the entry lines removed."""
    lines = (DATA / "z3/train.log").read_text().splitlines()
    bare = [t for t in lines if not t.startswith(("    params ", "    MACs ", "    fwd latency "))]
    assert len(lines) - len(bare) == 12
    (rec,), diag = parse_lines(bare)
    assert isinstance(rec, FlopsProfileRecord)
    assert rec.top_modules == ()
    assert rec.fwd_macs_per_gpu == 452.98e6
    assert diag.unparsed == {} and diag.cut == {}
