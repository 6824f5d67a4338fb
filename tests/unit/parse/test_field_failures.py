"""How runs end badly in real logs: NCCL watchdog timeouts and crashes, CUDA and host OOM, and a
multi-host CPU start-up, behind ``[defaultN]:``, ``[rankN]:`` and pdsh prefixes and glued to tqdm
bars. Expected values are read off the excerpts by hand (../shared/corpus/field, excerpts 06,
42, 43, 44, 45, 54, 55)."""

from __future__ import annotations

from field_logs import lines, of, parse_field

from dsmon.model.records import EventRecord
from dsmon.parse.log import parse_text

MIB, GIB = 1 << 20, 1 << 30


def events(number: int) -> list[EventRecord]:
    recs, diag = parse_field(number)
    assert sum(diag.unparsed.values()) == 0
    return of(recs, EventRecord)


def test_06_cuda_error_in_the_nccl_watchdog_under_default3() -> None:
    (crash,) = events(6)
    assert crash.name == "traceback" and crash.src.line == 1
    assert crash.detail["exception"] == "c10::CUDAError"
    assert crash.detail["what"] == "CUDA error: unknown error"  # the next line, "  what():  ..."
    assert crash.detail["native"] is True
    assert not crash.message.startswith("[default3]")


def test_42_allgather_timeouts_from_several_ranks() -> None:
    evs = events(42)
    assert [e.name for e in evs] == ["nccl_error"] * 5
    assert [e.src.rank for e in evs] == [1, 7, 2, 3, 5]
    assert [e.detail["ran_for_ms"] for e in evs] == [1800001, 1800385, 1800559, 1800561, 1800566]
    first = evs[0].detail
    assert (first["kind"], first["seq_num"], first["op_type"]) == (
        "timeout",
        211067,
        "_ALLGATHER_BASE",
    )
    assert (first["numel_in"], first["numel_out"], first["timeout_ms"]) == (
        2359296,
        18874368,
        1800000,
    )


def test_43_rank0_prefixed_watchdog_timeout_of_90_minutes() -> None:
    (timeout,) = events(43)
    assert timeout.name == "nccl_error" and timeout.src.line == 3 and timeout.src.rank == 0
    assert timeout.detail["timeout_ms"] == 5400000  # "Timeout(ms)=5400000"
    assert timeout.detail["ran_for_ms"] == 5400036
    assert (timeout.detail["seq_num"], timeout.detail["numel_out"]) == (357826, 101646336)
    assert timeout.ts is None  # glog's "E814 13:15:55" names no year: no timestamp is made up


def test_44_cuda_oom_in_the_zero2_reduce_bucket() -> None:
    recs, diag = parse_field(44)
    assert diag.cut == {"traceback": 1}  # the second "Traceback" at the end has no body
    (oom,) = of(recs, EventRecord)
    assert oom.name == "oom" and oom.src.line == 13
    assert oom.detail == {
        "tried_to_allocate_bytes": round(954.00 * MIB),
        "total_capacity_bytes": round(79.21 * GIB),
        "free_bytes": round(844.62 * MIB),
        "gpu": 7,
        "unstamped": True,
    }


def test_45_host_oom_killed_with_return_code_minus_9() -> None:
    killed, exited = events(45)
    assert (killed.name, killed.detail) == ("worker_exit", {"pid": 13266, "killed": True})
    assert killed.ts == "2023-04-14T13:11:27.879"
    assert exited.name == "worker_exit"
    assert (exited.detail["return_code"], exited.detail["local_rank"]) == (-9, 0)


def test_54_sigkill_glued_to_a_checkpoint_loading_bar() -> None:
    first, second = events(54)
    assert first.detail == {"pid": 6293, "killed": True}  # behind "`Loading checkpoint ...|"
    assert first.ts == "2023-09-10T11:45:59.207"
    assert second.detail == {"pid": 6294, "killed": True}


def test_55_cpu_ccl_start_on_two_pdsh_hosts() -> None:
    evs = events(55)
    assert [(e.name, e.src.node, e.detail["backend"]) for e in evs] == [
        ("dist_backend", "tt1", "ccl"),
        ("dist_backend", "tt2", "ccl"),
    ]
    assert [e.ts for e in evs] == ["2024-04-08T07:26:13.866", "2024-04-08T07:26:13.785"]


def test_06_without_its_what_line_the_next_line_is_not_swallowed() -> None:
    text = "\n".join(lines(6)[:1] + lines(6)[2:])  # the "  what():" line left out
    recs, _ = parse_text(text)
    (crash,) = of(recs, EventRecord)
    assert crash.detail["exception"] == "c10::CUDAError" and crash.detail["what"] is None
    assert crash.message == "terminate called after throwing an instance of 'c10::CUDAError'"
