"""EventParser on real output: corpus launcher/crash runs, and OOM/NCCL failures from GitHub issues.

Data (see each folder's README.md): flops_z0, z2 and events_* are corpus runs (DeepSpeed 0.19.8);
events_failures holds excerpts of real CUDA OOM and NCCL output; megatron_* are public logs.
"""

from __future__ import annotations

from pathlib import Path

from locations import DATA

from dsmon.model.records import EventRecord
from dsmon.model.wire import decode, encode
from dsmon.parse.log import parse_text


def events(rel: str) -> tuple[list[EventRecord], dict[str, int]]:
    text = (DATA / rel).read_text(encoding="utf-8")
    recs, diag = parse_text(text, run="r", file=Path(rel).name)
    return [r for r in recs if isinstance(r, EventRecord)], dict(diag.cut)


def summary(evs: list[EventRecord]) -> list[tuple[str, int | None, int | None]]:
    return [(e.name, e.src.line, e.src.rank) for e in evs]


def test_clean_run_launcher_and_engine_events() -> None:
    evs, cut = events("flops_z0/train.log")
    assert cut == {}
    assert summary(evs) == [
        ("world_info", 5, None),
        ("world_info", 6, None),
        ("world_info", 8, None),
        ("dist_backend", 15, None),
        ("deepspeed_version", 20, 0),
        ("optimizer", 31, 0),
        ("optimizer", 32, 0),
        ("worker_exit", 321, None),
        ("worker_exit", 322, None),
    ]
    assert evs[0].detail == {"world_info": {"localhost": [0, 1]}}
    assert evs[1].detail == {"nnodes": 1, "num_local_procs": 2, "node_rank": 0}
    assert evs[2].detail == {"dist_world_size": 2}
    assert evs[3].detail == {"backend": "gloo"}
    assert evs[4].detail == {"version": "0.19.8", "git_hash": "unknown", "git_branch": "unknown"}
    assert evs[4].ts == "2026-11-29T14:10:21.755"
    assert evs[5].detail == {"which": "basic", "optimizer": "AdamW"}
    assert evs[7].detail == {"pid": 23519, "return_code": 0}
    assert evs[7].message == "Process 23519 exits successfully."
    assert evs[8].detail == {"pid": 23518, "return_code": 0}


def test_zero_stage_and_final_optimizer() -> None:
    evs, _ = events("z2/train.log")
    zero = [e for e in evs if e.name == "zero_stage"]
    assert [e.detail for e in zero] == [{"dtype": "torch.float32", "stage": 2}]
    final = [e.detail["optimizer"] for e in evs if e.name == "optimizer"]
    assert final == ["AdamW", "DeepSpeedZeroOptimizer"]


def test_crash_on_both_ranks() -> None:
    evs, cut = events("events_crash_step17/train.log")
    assert cut == {}
    tbs = [e for e in evs if e.name == "traceback"]
    assert [(e.src.line, e.src.rank, e.message) for e in tbs] == [
        (249, 0, "RuntimeError: [train.py] deliberate crash at step 17 (rank 0)"),
        (255, 1, "RuntimeError: [train.py] deliberate crash at step 17 (rank 1)"),
    ]
    assert tbs[0].detail == {
        "exception": "RuntimeError",
        "frames": 2,
        "file": "/workspace/ds-cpu/scripts/train.py",
        "line": 124,
        "function": "main",
        "chained": False,
        "first_line": 244,
        "unstamped": True,  # a worker's traceback has no time of its own
    }
    exits = [e for e in evs if e.name == "worker_exit"]
    assert [e.detail.get("pid") for e in exits[:2]] == [26007, 26008]
    assert exits[0].detail["killed"] is True
    assert (exits[2].src.line, exits[2].detail["return_code"], exits[2].detail["local_rank"]) == (
        258,
        1,
        1,
    )
    assert exits[2].ts == "2026-11-29T14:16:13.408"


def test_crash_on_one_rank_and_the_peer_error() -> None:
    evs, cut = events("events_crash_rank1_step17/train.log")
    assert cut == {}
    tbs = [e for e in evs if e.name == "traceback"]
    assert [(e.src.line, e.src.rank) for e in tbs] == [(249, 1), (299, 0)]
    peer = tbs[1]
    assert peer.message.startswith(
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [127.0.0.1]:2952."
    )
    assert peer.detail["frames"] == 20
    assert (peer.detail["file"], peer.detail["line"], peer.detail["function"]) == (
        "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
        3252,
        "all_reduce",
    )
    assert peer.detail["first_line"] == 250


def test_deepspeed_assertion_in_pipeline_engine() -> None:
    evs, _ = events("events_pipeline_wallclock_crash/train.log")
    tbs = [e for e in evs if e.name == "traceback"]
    assert [(e.src.line, e.src.rank, e.detail["exception"]) for e in tbs] == [
        (204, 0, "AssertionError"),
        (237, 1, "RuntimeError"),
    ]
    assert tbs[0].message == "AssertionError: bwd_microstep timer has already been started"
    assert tbs[0].detail["frames"] == 13
    assert tbs[0].detail["function"] == "start"


def test_killed_job_has_no_ending() -> None:
    evs, cut = events("events_sigkill_all/train.log")
    assert cut == {}
    assert [e.name for e in evs] == [
        "world_info",
        "world_info",
        "world_info",
        "dist_backend",
        "deepspeed_version",
        "optimizer",
        "zero_stage",
        "zero_init",  # Reduce bucket size 500000000
        "zero_init",  # Allgather bucket size 500000000
        "optimizer",
    ]
    assert [e.detail for e in evs if e.name == "zero_init"] == [
        {"reduce_bucket_size": 500000000},
        {"allgather_bucket_size": 500000000},
    ]


def test_oom_at_the_end_of_a_rank_traceback() -> None:
    evs, cut = events("events_failures/llamafactory_7781_oom.log")
    assert cut == {"traceback": 1}  # rank 2's traceback is cut by the end of the excerpt
    tb, oom = evs
    assert (tb.name, tb.src.line, tb.src.rank, tb.src.sub) == ("traceback", 5, 5, 0)
    assert tb.detail["exception"] == "torch.OutOfMemoryError"
    assert tb.detail["frames"] == 2
    assert tb.detail["first_line"] == 1  # the excerpt starts with frames, not the header
    assert (oom.name, oom.src.line, oom.src.rank, oom.src.sub) == ("oom", 5, 5, 1)
    assert oom.detail == {
        "tried_to_allocate_bytes": 270 * 2**20,
        "total_capacity_bytes": round(23.65 * 2**30),
        "free_bytes": round(208.06 * 2**20),
        "gpu": 5,
        "unstamped": True,
    }


def test_unprefixed_oom_line_is_not_taken_for_a_host() -> None:
    evs, cut = events("events_failures/llamafactory_9510_oom.log")
    assert cut == {"traceback": 1}
    (oom,) = evs
    assert (oom.name, oom.src.line, oom.src.node, oom.src.rank) == ("oom", 1, None, None)
    assert oom.message.startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 56.00 MiB."
    )
    assert oom.detail["tried_to_allocate_bytes"] == 56 * 2**20
    assert oom.detail["gpu"] == 4
    assert oom.detail["total_capacity_bytes"] == round(79.33 * 2**30)


def test_older_oom_message_formats() -> None:
    (oom,), _ = events("events_failures/gpt4llm_16_oom.log")
    assert oom.detail == {
        "tried_to_allocate_bytes": 172 * 2**20,
        "total_capacity_bytes": round(79.35 * 2**30),
        "free_bytes": round(12.19 * 2**20),
        "gpu": 0,
        "unstamped": True,
    }
    (oom,), _ = events("events_failures/deepmatcher_74_oom.log")
    assert oom.detail == {
        "tried_to_allocate_bytes": 20 * 2**20,
        "total_capacity_bytes": round(1.96 * 2**30),
        "free_bytes": round(15.62 * 2**20),
        "gpu": 0,
        "unstamped": True,
    }


def test_nccl_watchdog_timeouts_per_rank() -> None:
    evs, _ = events("events_failures/basicsr_737_watchdog.log")
    assert [(e.name, e.src.line, e.src.rank) for e in evs] == [
        ("nccl_error", 1, 1),
        ("nccl_error", 3, 0),
        ("nccl_error", 5, 2),
    ]
    assert evs[0].detail == {
        "kind": "timeout",
        "ran_for_ms": 600020,
        "seq_num": 808,
        "op_type": "ALLREDUCE",
        "numel_in": 9801523,
        "numel_out": 9801523,
        "timeout_ms": 600000,
        "unstamped": True,
    }


def test_older_unprefixed_watchdog_lines_take_the_rank_from_the_text() -> None:
    evs, _ = events("events_failures/pytorch_118369_watchdog.log")
    assert [(e.src.line, e.src.rank, e.detail["ran_for_ms"]) for e in evs] == [
        (3, 2, 1800648),
        (4, 4, 1800798),
        (5, 6, 1800799),
        (6, 3, 1800782),
    ]
    assert {e.detail["op_type"] for e in evs} == {"BROADCAST"}
    assert {e.detail["timeout_ms"] for e in evs} == {1800000}


def test_terminal_wrapped_watchdog_line_is_joined() -> None:
    evs, _ = events("events_failures/sglang_3424_wrapped_watchdog.log")
    (ev,) = evs
    assert (ev.name, ev.src.line, ev.src.rank) == ("nccl_error", 1, 4)
    assert ev.detail == {
        "kind": "timeout",
        "ran_for_ms": 600022,
        "seq_num": 1522789,
        "op_type": "_ALLGATHER_BASE",
        "numel_in": 298960,
        "numel_out": 4783360,
        "timeout_ms": 600000,
        "unstamped": True,
    }


def test_watchdog_line_cut_at_the_end_of_input_still_counts() -> None:
    first = (DATA / "events_failures/sglang_3424_wrapped_watchdog.log").read_text().splitlines()[0]
    recs, _ = parse_text(first, run="r", file="x.log")
    (ev,) = [r for r in recs if isinstance(r, EventRecord)]
    assert (ev.name, ev.src.rank) == ("nccl_error", 4)
    assert ev.detail == {
        "kind": "timeout",
        "ran_for_ms": None,
        "seq_num": 1522789,
        "op_type": "_ALLGATHER_BASE",
        "numel_in": 298960,
        "numel_out": 4783360,
        "timeout_ms": None,
        "unstamped": True,
    }


def test_nccl_error_ending_a_traceback() -> None:
    evs, cut = events("events_failures/dle_1386_nccl_traceback.log")
    assert cut == {"traceback": 1}
    tb, nccl = evs
    assert (tb.src.line, tb.src.rank, tb.detail["exception"]) == (
        7,
        2,
        "torch.distributed.DistBackendError",
    )
    assert tb.detail["frames"] == 3
    assert (nccl.name, nccl.src.line, nccl.src.sub) == ("nccl_error", 7, 1)
    assert nccl.detail == {
        "kind": "error",
        "where": "/home/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2028",
        "reason": "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "version": "2.20.5",
        "unstamped": True,
    }


def test_unprefixed_traceback_in_megatron_log() -> None:
    evs, cut = events("megatron_alcf_tgs/train.log")
    assert cut == {"traceback": 1}  # the first of the two pasted headers never got frames
    (tb,) = evs
    assert (
        tb.message
        == "AttributeError: 'GPTModel' object has no attribute '_get_tp_replicated_param_patterns'"
    )
    assert (tb.src.line, tb.src.rank) == (28, None)
    assert tb.detail["frames"] == 9
    assert tb.detail["function"] == "__getattr__"
    assert tb.detail["first_line"] == 9


def test_deepspeed_095_engine_events() -> None:
    evs, _ = events("megatron_ds095_llama/train.log")
    assert [(e.name, e.detail) for e in evs if e.name != "pipeline_stage"] == [
        ("deepspeed_version", {"version": "0.9.5", "git_hash": "unknown", "git_branch": "unknown"}),
        ("optimizer", {"which": "basic", "optimizer": "FusedAdam"}),
        ("optimizer", {"which": "final", "optimizer": "FusedAdam"}),
    ]  # and the pipeline engine's four stage lines (next test)


def test_pipeline_engine_stage_lines() -> None:
    """``RANK=0 STAGE=0 LAYERS=14 [0, 14) STAGE_PARAMS=... TOTAL_PARAMS=... UNIQUE_PARAMS=...``:
    how the pipeline engine split the model, one line per rank (DeepSpeed 0.9.5)."""
    text = (DATA / "megatron_ds095_llama/train.log").read_text(encoding="utf-8")
    recs, diag = parse_text(text, run="r", file="train.log")
    evs = [r for r in recs if isinstance(r, EventRecord) and r.name == "pipeline_stage"]
    assert len(evs) == 4 and not diag.unparsed
    assert evs[2].src.line == 152
    assert evs[2].detail == {
        "rank": 4, "stage": 1, "layers": 15, "first_layer": 14, "end_layer": 29,
        "stage_params": 336381952, "total_params": 1345523712, "unique_params": 1345523712,
    }  # fmt: skip


def test_events_survive_the_wire() -> None:
    for rel in (
        "events_crash_rank1_step17/train.log",
        "events_failures/dle_1386_nccl_traceback.log",
    ):
        evs, _ = events(rel)
        assert [decode(encode(e)) for e in evs] == evs


def test_allocator_flush_warning_of_zero3() -> None:
    """DeepSpeed 0.10.0's own stage-3 warning (retry count staged, see the folder's README)."""
    evs, _ = events("zero3_flush_warning_v0100/train.log")
    flushes = [e for e in evs if e.name == "allocator_flush"]
    assert [(e.src.line, e.detail) for e in flushes] == [
        (208, {"flushes": 3}),
        (231, {"flushes": 3}),
        (258, {"flushes": 3}),
        (281, {"flushes": 3}),
    ]
    assert flushes[0].ts == "2026-12-01T13:02:15.240"
    assert flushes[0].message.startswith("3 pytorch allocator cache flushes since last step.")


def test_torchruns_agent_line_is_the_failed_workers_exit() -> None:
    """tests/data/events_torchrun_sigkill line 62 and probe_crash_torchrun line 87: torchrun's
    agent names the failed worker's exit code and local rank (its own, unlike the command line
    DeepSpeed's launcher prints)."""
    for rel, line, code, pid in (
        ("events_torchrun_sigkill/train.log", 62, -9, 11752),
        ("probe_crash_torchrun/train.log", 87, 1, 23325),
    ):
        evs, _ = events(rel)
        (ex,) = [
            e
            for e in evs
            if e.name == "worker_exit"
            and not e.detail.get("killed") and not e.detail.get("root_cause")
        ]  # fmt: skip
        assert ex.src.line == line
        assert ex.detail == {
            "return_code": code, "local_rank": 1, "pid": pid, "launcher": "torchrun"
        }  # fmt: skip


def test_torchruns_agent_stopping_its_workers_is_a_kill() -> None:
    """tests/data/events_torchrun_sigterm lines 118-119: torchrun, sent SIGTERM, stops its two
    workers (``Sending process N closing signal SIGTERM``); so does it after a worker failed
    (events_torchrun_sigkill line 61, its surviving worker)."""
    for rel, pids in (
        ("events_torchrun_sigterm/train.log", [(118, 19834), (119, 19835)]),
        ("events_torchrun_sigkill/train.log", [(61, 11751)]),
    ):
        evs, _ = events(rel)
        stopped = [e for e in evs if e.name == "worker_exit" and e.detail.get("killed")]
        assert [(e.src.line, e.detail["pid"]) for e in stopped] == pids
        assert {e.detail["signal"] for e in stopped} == {"SIGTERM"}
        assert {e.detail["launcher"] for e in stopped} == {"torchrun"}


def test_a_signal_that_stopped_the_job_is_no_traceback() -> None:
    """Real jobs stopped from outside. Each process that says it got the signal is a
    ``signalled`` event: DeepSpeed's launcher's ``Main process received SIGINT`` (line 115),
    the workers' and the ``deepspeed`` command's own ``KeyboardInterrupt`` tracebacks, torchrun's
    agent's ``Received 2 death signal`` (line 61) and its ``SignalException`` traceback (line
    103; it was a ``traceback`` event, which the health rules then had to take back out)."""
    want = {
        "events_sigint_deepspeed/train.log": [
            (69, 0, {"signal": "SIGINT"}),
            (113, 1, {"signal": "SIGINT"}),
            (115, None, {"signal": "SIGINT", "launcher": "deepspeed"}),
            (130, None, {"signal": "SIGINT"}),  # the `deepspeed` command (runner.py) itself
        ],
        "events_torchrun_sigint/train.log": [
            (61, None, {"signal": "SIGINT", "launcher": "torchrun"}),
            (69, 1, {"signal": "SIGINT"}),
            (75, 0, {"signal": "SIGINT"}),
            (103, None, {"signal": "SIGINT", "launcher": "torchrun", "pid": 6761}),
        ],
        "events_torchrun_sigterm/train.log": [
            (117, None, {"signal": "SIGTERM", "launcher": "torchrun"}),
            (147, None, {"signal": "SIGTERM", "launcher": "torchrun", "pid": 19830}),
        ],
        "events_sigint_python/train.log": [(58, 0, {"signal": "SIGINT"})],
    }
    for rel, expected in want.items():
        evs, _ = events(rel)
        got = [
            (e.src.line, e.src.rank, {k: e.detail[k] for k in ("signal", "launcher", "pid")
                                      if k in e.detail})
            for e in evs
            if e.name == "signalled"
        ]  # fmt: skip
        assert got == expected, rel
        assert not [e for e in evs if e.name == "traceback"], rel  # no failure among them


def test_torchruns_lines_keep_their_own_time() -> None:
    """torchrun's lines carry a glog header (``W1207 15:45:09.671000 6761 torch/...py:753]``)
    with no year. They took the time of the last DeepSpeed line before them, 36 s early in
    events_torchrun_sigterm (its last timer line came long before torchrun got SIGTERM)."""
    evs, _ = events("events_torchrun_sigterm/train.log")
    by_line = {e.src.line: e.ts for e in evs}
    assert by_line[117] == "2026-12-07T14:26:05.444"  # Received 15 death signal
    assert by_line[118] == "2026-12-07T14:26:05.445"  # Sending process N closing signal
    assert by_line[147] == "2026-12-07T14:26:05.450"  # its traceback: the glog line before it


def test_a_glog_time_takes_the_year_of_the_stamp_before_it() -> None:
    """The glog header prints no year: a line's month is put in the last stamp's year, the next
    year's when it is more than half a year before the stamp's month (New Year's Eve)."""
    real = (DATA / "events_torchrun_sigint/train.log").read_text("utf-8").splitlines()[60]
    dec, jan = real, real.replace("W1207 ", "W0101 ", 1)
    got = {}
    for text, before in ((dec, "2026-12-07 15:45:08,000"), (jan, "2026-12-31 23:59:58,000"),
                         (dec, "2026-12-08 00:00:01,000")):  # fmt: skip
        log = f"[{before}] [INFO] [launch.py:1:main] dist_world_size=2\n{text}\n"
        evs = [e for e in parse_text(log, run="r", file="f")[0] if isinstance(e, EventRecord)]
        got[(text[:5], before[:10])] = [e.ts for e in evs if e.name == "signalled"]
    assert got == {
        ("W1207", "2026-12-07"): ["2026-12-07T15:45:09.671"],
        ("W0101", "2026-12-31"): ["2027-01-01T15:45:09.671"],
        ("W1207", "2026-12-08"): ["2026-12-07T15:45:09.671"],  # another process's line, earlier
    }


def test_torchruns_root_cause_names_the_failed_workers_global_rank() -> None:
    """torchrun's failure report (after its ``ChildFailedError`` traceback) names the first
    failed worker's global rank, local rank, exit code, pid and host: events_torchrun_sigkill
    lines 92-99 (rank 1 SIGKILLed), probe_crash_torchrun lines 117-124 (rank 1 raised). Its
    ``Failures:`` entries before it are the workers torchrun stopped itself (SIGTERM)."""
    for rel, line, code, pid in (
        ("events_torchrun_sigkill/train.log", 92, -9, 11752),
        ("probe_crash_torchrun/train.log", 117, 1, 23325),
    ):
        evs, cut = events(rel)
        (root,) = [e for e in evs if e.detail.get("root_cause")]
        assert (root.name, root.src.line, cut) == ("worker_exit", line, {}), rel
        assert root.detail == {
            "return_code": code, "rank": 1, "local_rank": 1, "pid": pid, "host": "localhost",
            "launcher": "torchrun", "root_cause": True,
        }  # fmt: skip
