"""ZeRO set-up and see_memory_usage output as users pasted it: editor line numbers, NCCL INFO
lines in between, NPU, pdsh host prefixes, Markdown quoting. Expected values are read off the
excerpts by hand (../shared/corpus/field, excerpts 38, 39, 40, 41, 56, 57)."""

from __future__ import annotations

from field_logs import of, parse_field

from dsmon.model.records import EventRecord, MemoryRecord

GIB = 1 << 30


def test_38_zero3_creation_with_editor_line_numbers() -> None:
    recs, diag = parse_field(38)
    assert sum(diag.unparsed.values()) == 0
    events = of(recs, EventRecord)
    assert [(e.src.line, e.name) for e in events] == [
        (2, "deepspeed_version"),  # "  3 [2023-09-12 00:26:08,683] ... DeepSpeed info: ..."
        (7, "optimizer"),
        (9, "zero_stage"),
        (10, "zero_stage"),
    ]
    assert events[0].detail["version"] == "0.10.2"
    assert events[0].ts == "2023-09-12T00:26:08.683"
    assert events[1].detail == {"which": "basic", "optimizer": "FusedAdam"}
    assert events[2].detail == {
        "dtype": "fp16",
        "stage": 3,
        "mics": False,
        "hierarchical_params_gather": False,
    }
    assert events[3].detail == {"dtype": "torch.float16", "stage": 3}


def test_39_stage3_init_buckets_offload_and_memory() -> None:
    recs, diag = parse_field(39)
    assert sum(diag.unparsed.values()) == 0 and sum(diag.cut.values()) == 0
    mem = of(recs, MemoryRecord)
    assert [m.label for m in mem] == [
        "Stage 3 initialize beginning",
        "DeepSpeedZeRoOffload initialize [begin]",
        "DeepSpeedZeRoOffload initialize [end]",
    ]
    first = mem[0]
    assert first.allocated_bytes == round(7.18 * GIB)
    assert first.max_allocated_bytes == round(11.01 * GIB)
    assert (first.cached_bytes, first.max_cached_bytes) == (round(7.2 * GIB), 11 * GIB)
    assert (first.cpu_used_bytes, first.cpu_used_pct) == (round(103.15 * GIB), 10.6)
    assert mem[2].cpu_used_bytes == round(103.26 * GIB)
    zero = [e.detail for e in of(recs, EventRecord) if e.name == "zero_init"]
    assert zero == [
        {"reduce_bucket_size": 500_000_000},  # "Reduce bucket size 500,000,000"
        {"prefetch_bucket_size": 50_000_000},
        {"persistent_numel": 266240, "persistent_params": 65},
    ]


def test_40_param_offload_between_nccl_info_lines() -> None:
    recs, diag = parse_field(40)
    assert sum(diag.unparsed.values()) == 0
    (offload,) = of(recs, EventRecord)
    assert offload.name == "zero_init" and offload.src.line == 9
    assert offload.detail == {"persistent_numel": 42194240, "persistent_params": 1075}
    assert offload.src.node is None  # "Tencent-L20:1157794:..." lines are NCCL's, no prefix
    (mem,) = of(recs, MemoryRecord)
    assert mem.label == "DeepSpeedZeRoOffload initialize [end]"
    assert (mem.allocated_bytes, mem.max_allocated_bytes) == (round(8.87 * GIB), round(31.57 * GIB))
    assert (mem.cached_bytes, mem.max_cached_bytes) == (round(31.61 * GIB), 32 * GIB)
    assert (mem.cpu_used_bytes, mem.cpu_used_pct) == (round(58.43 * GIB), 3.9)


def test_41_npu_offload_partitions_last_block_cut() -> None:
    recs, diag = parse_field(41)
    assert sum(diag.unparsed.values()) == 0
    assert diag.cut == {"memory": 1}  # the excerpt ends before the fourth block's CPU line
    mem = of(recs, MemoryRecord)
    assert [m.label for m in mem] == [
        "Before creating fp16 partitions",
        "After creating fp16 partitions: 5",
        "Before creating fp32 partitions",
    ]
    assert all(m.allocated_bytes == 0 and m.max_cached_bytes == 0 for m in mem)  # NPU: 0.0 GB
    assert [m.cpu_used_pct for m in mem] == [8.0, 13.6, 13.7]
    assert mem[1].cpu_used_bytes == round(204.98 * GIB)


def test_56_pdsh_hosts_memory_and_exits() -> None:
    recs, diag = parse_field(56)
    assert sum(diag.unparsed.values()) == 0
    (mem,) = of(recs, MemoryRecord)
    assert (mem.label, mem.src.node) == ("end-of-run", "gadi-gpu-v100-0010")
    assert (mem.allocated_bytes, mem.max_allocated_bytes) == (
        round(26.84 * GIB),
        round(27.66 * GIB),
    )
    assert (mem.cached_bytes, mem.max_cached_bytes) == (round(26.95 * GIB), 28 * GIB)
    exits = [e for e in of(recs, EventRecord) if e.name == "worker_exit"]
    assert [(e.src.node, e.detail["pid"]) for e in exits] == [
        ("gadi-gpu-v100-0010", 15832),
        ("gadi-gpu-v100-0010", 15833),
        ("gadi-gpu-v100-0062", 1688397),
        ("gadi-gpu-v100-0062", 1688394),
        ("gadi-gpu-v100-0062", 1688396),
        ("gadi-gpu-v100-0062", 1688395),
        ("gadi-gpu-v100-0010", 15835),
        ("gadi-gpu-v100-0010", 15834),
    ]
    assert all(e.detail["return_code"] == 0 for e in exits)


def test_57_markdown_quoted_zero2_setup() -> None:
    recs, diag = parse_field(57)
    assert sum(diag.unparsed.values()) == 0
    mem = of(recs, MemoryRecord)
    assert [m.label for m in mem] == [
        "After initializing optimizer states",
        "After initializing ZeRO optimizer",
    ]
    assert mem[0].ts == "2022-10-14T06:48:57.217"
    assert (mem[0].allocated_bytes, mem[0].cached_bytes) == (round(1.66 * GIB), round(3.27 * GIB))
    assert mem[0].max_cached_bytes == 3 * GIB
    assert (mem[0].cpu_used_bytes, mem[0].cpu_used_pct) == (round(21.36 * GIB), 68.1)
    (final,) = of(recs, EventRecord)
    assert final.detail == {"which": "final", "optimizer": "AdamW"}
