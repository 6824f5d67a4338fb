"""The tailer matrix: real files in tmp_path, real DeepSpeed lines, every line exactly once.

Each test writes the lines of tests/data/z2/train.log (DeepSpeed 0.19.8, ZeRO-2, 2 ranks) the
way a training run, logrotate or a user would, polls the tailer in between, and compares what
it emitted with a replay of the same bytes: same lines, same offsets, nothing twice. Most
tests parse with ``LineEcho`` (one record per logical line) so the assertion is about lines;
the resume tests use the real parsers, since resuming must also keep the step clock right.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
from locations import DATA
from shared_fixtures import read_log, settled

from collectors.tail import follower as follower_mod
from collectors.tail.profile_file import PROFILE_SETTLE_S
from collectors.tail.state import Checkpoint, StateFile
from collectors.tail.tailer import Tailer, Waker
from dsmon.model.records import (
    ConfigRecord,
    EventRecord,
    FlopsProfileRecord,
    IterationRecord,
    Record,
    TimerRecord,
    record_key,
)
from dsmon.parse.base import ParseContext
from dsmon.parse.lines import LogLine
from dsmon.parse.log import LogParser
from dsmon.parse.run_files import run_name

Z2_LINES = (DATA / "z2" / "train.log").read_bytes().splitlines(keepends=True)
PROFILE = DATA / "flops_detailed_file" / "flops_profile.txt"

Seen = tuple[str | None, int | None, int | None, str]


class LineEcho:
    """A sub-parser that turns every logical line into one record carrying its text."""

    in_block = False

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record]:
        return [EventRecord(src=ctx.src(line), ts=ctx.ts(line), name="line", message=line.text)]

    def finish(self, ctx: ParseContext) -> list[Record]:
        return []


def echo(label: str) -> LogParser:
    return LogParser("t", label, "n", parsers=[LineEcho()])


def seen(records: Iterable[Record]) -> list[Seen]:
    out = []
    for r in records:
        assert isinstance(r, EventRecord)
        out.append((r.src.file, r.src.line, r.src.offset, r.message))
    return out


def replay(chunks: Iterable[bytes], label: str) -> list[Seen]:
    """What parsing the bytes in one go gives: the ground truth for a generation."""
    parser = echo(label)
    out: list[Record] = []
    offset = 0
    for n, raw in enumerate(b"".join(chunks).splitlines(keepends=True), start=1):
        out += parser.feed(raw.decode("utf-8", "replace"), offset=offset, line=n)
        offset += len(raw)
    return seen(out + parser.finish())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tailer(
    tmp_path: Path, *patterns: str, clock: Clock | None = None, rescan_s: float = 0, **kw: object
) -> Tailer:
    return Tailer(
        list(patterns),
        run="t",
        node="n",
        state=StateFile(tmp_path / "state" / "tail.json"),
        make_parser=echo,
        rescan_s=rescan_s,
        clock=clock or Clock(),
        **kw,  # type: ignore[arg-type]
    )


def append(path: Path, *chunks: bytes) -> None:
    with path.open("ab") as f:
        for c in chunks:
            f.write(c)


def poll_all(t: Tailer) -> list[Record]:
    batch = t.poll()
    t.commit(batch.checkpoint)
    return batch.records


def test_growing_file_in_odd_chunks_gives_every_line_once(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    data = b"".join(Z2_LINES)
    got: list[Record] = []
    # Chunk sizes that cut lines anywhere, including inside a multi-byte run of spaces.
    pos = 0
    for i, size in enumerate([1, 7, 100, 333, 4096, 2, 9000] * 40):
        append(log, data[pos : pos + size])
        pos += size
        if i % 3 == 0:
            got += poll_all(t)
        if pos >= len(data):
            break
    got += poll_all(t)
    assert pos >= len(data)
    assert seen(got) == replay(Z2_LINES, "train.log")
    assert len(got) == 366


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    line = Z2_LINES[183]  # "[Rank 0] time (ms) | fwd: 350.75 | bwd: 754.18 | ..."
    append(log, line[:25])
    assert poll_all(t) == []
    append(log, line[25:-1])
    assert poll_all(t) == []
    append(log, b"\n")
    (rec,) = poll_all(t)
    text = "time (ms) | fwd: 350.75 | bwd: 754.18 | bwd_inner: 675.36 | bwd_allreduce: 78.63 | step: 190.22"
    assert seen([rec]) == [("train.log", 1, 0, text)]
    assert rec.src.rank == 0


def test_final_poll_finds_new_files_and_release_parses_the_last_line(tmp_path: Path) -> None:
    """At a stop: a per-rank log created since the last glob match, and an unterminated last
    line, are read; the saved position stays at that line's start for a later restart."""
    logs = tmp_path / "rank_logs"
    logs.mkdir()
    t = tailer(tmp_path, str(logs / "*_rank*.log"), rescan_s=3600)  # matched at the first poll
    append(logs / "20261129141018_rank0.log", *Z2_LINES[:2])
    assert len(poll_all(t)) == 2
    rank1 = logs / "20261129141018_rank1.log"
    append(rank1, Z2_LINES[2], Z2_LINES[183][:-1])  # the last line has no newline yet
    assert poll_all(t) == []  # not matched again yet
    batch = t.poll(final=True)
    assert [(r.src.file, r.src.line) for r in batch.records] == [("20261129141018_rank1.log", 1)]
    (last,) = t.release()
    assert seen([last])[0][1:3] == (2, len(Z2_LINES[2]))
    assert last.src.rank == 0  # "[Rank 0]" in the line itself
    pos = next(p for p in batch.checkpoint.files if p.path == str(rank1))
    assert (pos.offset, pos.line) == (len(Z2_LINES[2]), 1)


def test_missing_file_is_followed_once_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "later" / "train.log"
    t = tailer(tmp_path, str(log))
    assert poll_all(t) == []
    log.parent.mkdir()
    append(log, *Z2_LINES[:10])
    assert seen(poll_all(t)) == replay(Z2_LINES[:10], "train.log")


def test_rotation_by_rename_finishes_the_old_file_first(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    # The glob also matches the rotated name: it must not be read a second time.
    t = tailer(tmp_path, str(tmp_path / "train.log*"))
    append(log, *Z2_LINES[:50])
    got = poll_all(t)
    append(log, *Z2_LINES[50:60])  # written just before the rotation, not polled yet
    log.rename(tmp_path / "train.log.1")
    append(log, *Z2_LINES[60:100])
    got += poll_all(t)
    got += poll_all(t)
    assert seen(got) == replay(Z2_LINES[:60], "train.log") + replay(Z2_LINES[60:100], "train.log#1")


def test_copytruncate_reads_the_tail_from_the_copy(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    append(log, *Z2_LINES[:40])
    got = poll_all(t)
    append(log, *Z2_LINES[40:45])  # between our last read and logrotate's copy
    shutil.copyfile(log, tmp_path / "train.log.1")
    os.truncate(log, 0)
    append(log, *Z2_LINES[45:70])
    got += poll_all(t)
    assert seen(got) == replay(Z2_LINES[:45], "train.log") + replay(Z2_LINES[45:70], "train.log#1")


def by_file(lines: Iterable[Seen]) -> list[Seen]:
    """Lines in (file, offset) order: the generations of a glob are read in no fixed order."""
    return sorted(lines, key=lambda s: (str(s[0]), s[2] or 0))


def logrotate(folder: Path, name: str, keep: int = 5) -> None:
    """logrotate's default naming: ``name.N`` becomes ``name.N+1``, ``name`` becomes ``name.1``."""
    for n in range(keep, 0, -1):
        older = folder / f"{name}.{n}"
        if older.exists():
            older.rename(folder / f"{name}.{n + 1}")
    (folder / name).rename(folder / f"{name}.1")


def test_glob_over_rotated_names_reads_each_file_once(tmp_path: Path) -> None:
    """``--log 'train.log*'`` started after a rotation, then rotated again, twice across a
    restart: a file renamed to a name the glob matches is recognised by its inode and first
    bytes, not read again under its new name."""
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:100])
    logrotate(tmp_path, "train.log")
    append(log, *Z2_LINES[100:200])
    t1 = tailer(tmp_path, str(tmp_path / "train.log*"))
    got = poll_all(t1)
    logrotate(tmp_path, "train.log")  # .1 (read under that name) -> .2, train.log -> .1
    append(log, *Z2_LINES[200:300])
    got += poll_all(t1) + poll_all(t1)
    t1.close()
    logrotate(tmp_path, "train.log")  # while the collector is stopped
    append(log, *Z2_LINES[300:400])
    t2 = tailer(tmp_path, str(tmp_path / "train.log*"))
    got += poll_all(t2) + poll_all(t2)
    assert by_file(seen(got)) == by_file(
        replay(Z2_LINES[100:200], "train.log")
        + replay(Z2_LINES[200:300], "train.log#1")
        + replay(Z2_LINES[300:400], "train.log#2")
        + replay(Z2_LINES[:100], "train.log.1")
    )


def test_a_compressed_rotation_is_left_alone(tmp_path: Path) -> None:
    """logrotate's ``compress`` makes ``train.log.2.gz`` from ``train.log.2``, which was read:
    a glob over the rotated names must not read the gzip bytes as a new log."""
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:100])
    t = tailer(tmp_path, str(tmp_path / "train.log*"))
    got = poll_all(t)
    logrotate(tmp_path, "train.log")
    append(log, *Z2_LINES[100:200])
    got += poll_all(t)
    rotated = tmp_path / "train.log.1"
    (tmp_path / "train.log.1.gz").write_bytes(gzip.compress(rotated.read_bytes()))
    rotated.unlink()
    got += poll_all(t) + poll_all(t)
    t.close()
    assert by_file(seen(got)) == by_file(
        replay(Z2_LINES[:100], "train.log") + replay(Z2_LINES[100:200], "train.log#1")
    )


def test_copytruncate_copy_matched_by_the_glob_before_the_truncation(tmp_path: Path) -> None:
    """A ``*.log`` glob matches logrotate's copy (``dateext``) between the copy and the
    truncation: it starts with the bytes being read, so it is the same generation."""
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(tmp_path / "*.log"))
    append(log, *Z2_LINES[:40])
    got = poll_all(t)
    append(log, *Z2_LINES[40:45])
    shutil.copyfile(log, tmp_path / "train-20261201.log")
    got += poll_all(t)  # the copy is there, the original not truncated yet
    os.truncate(log, 0)
    append(log, *Z2_LINES[45:70])
    got += poll_all(t) + poll_all(t)
    assert seen(got) == replay(Z2_LINES[:45], "train.log") + replay(Z2_LINES[45:70], "train.log#1")


@pytest.mark.parametrize("recreated", [True, False])
def test_renamed_file_still_written_is_read_until_idle(tmp_path: Path, recreated: bool) -> None:
    """``tee`` keeps writing to a log renamed under it: its lines are read as long as it is
    written (with or without a new file at the path), and only an idle file is let go."""
    log = tmp_path / "train.log"
    clock = Clock()
    t = tailer(tmp_path, str(tmp_path / "train.log*"), clock=clock)
    writer = log.open("ab")
    writer.writelines(Z2_LINES[:50])
    writer.flush()
    got = poll_all(t)
    log.rename(tmp_path / "train.log.1")
    if recreated:
        append(log, *Z2_LINES[300:310])
    for i in range(50, 250, 50):  # a slow writer: a burst every 20 s, for over a minute
        writer.writelines(Z2_LINES[i : i + 50])
        writer.flush()
        clock.now += 20
        got += poll_all(t)
    writer.close()
    clock.now += follower_mod.MISSING_LINGER_S + 1
    got += poll_all(t)  # idle long enough: its generation ends
    append(tmp_path / "train.log.1", *Z2_LINES[250:260])  # not followed any more
    got += poll_all(t)
    new = replay(Z2_LINES[300:310], "train.log#1") if recreated else []
    assert by_file(seen(got)) == by_file(replay(Z2_LINES[:250], "train.log") + new)
    assert t.checkpoint().finished[-1].offset == sum(map(len, Z2_LINES[:250]))


def test_a_file_renamed_away_and_back_is_the_same_generation(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    append(log, *Z2_LINES[:20])
    got = poll_all(t)
    log.rename(tmp_path / "train.log.tmp")
    append(tmp_path / "train.log.tmp", *Z2_LINES[20:30])
    got += poll_all(t)
    (tmp_path / "train.log.tmp").rename(log)
    append(log, *Z2_LINES[30:40])
    got += poll_all(t) + poll_all(t)
    assert seen(got) == replay(Z2_LINES[:40], "train.log")


def test_restart_while_a_renamed_file_is_read_resumes_both(tmp_path: Path) -> None:
    """Killed while the renamed file is still read: both it and the new file are resumed."""
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:50])
    t1 = tailer(tmp_path, str(log))
    got = poll_all(t1)
    log.rename(tmp_path / "train.log.1")
    append(log, *Z2_LINES[300:310])
    got += poll_all(t1)
    append(tmp_path / "train.log.1", *Z2_LINES[50:80])
    append(log, *Z2_LINES[310:320])
    got += t1.poll().records  # read, never delivered: killed here
    t2 = tailer(tmp_path, str(log))
    got += poll_all(t2)
    assert by_file(set(seen(got))) == by_file(
        replay(Z2_LINES[:80], "train.log") + replay(Z2_LINES[300:320], "train.log#1")
    )


def test_truncation_that_regrows_past_the_old_size_is_noticed(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    append(log, *Z2_LINES[:5])
    got = poll_all(t)
    log.write_bytes(b"".join(Z2_LINES[100:160]))  # reopened with "w", already longer
    got += poll_all(t)
    assert seen(got) == replay(Z2_LINES[:5], "train.log") + replay(Z2_LINES[100:160], "train.log#1")


def test_delete_and_recreate(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    clock = Clock()
    t = tailer(tmp_path, str(log), clock=clock)
    append(log, *Z2_LINES[:30])
    got = poll_all(t)
    log.unlink()
    assert poll_all(t) == []
    clock.now += follower_mod.MISSING_LINGER_S + 1  # gone for good: the generation ends
    assert poll_all(t) == []
    append(log, *Z2_LINES[30:50])
    got += poll_all(t)
    assert seen(got) == replay(Z2_LINES[:30], "train.log") + replay(Z2_LINES[30:50], "train.log#1")


def test_delete_and_recreate_between_polls(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    append(log, *Z2_LINES[:30])
    got = poll_all(t)
    log.unlink()
    append(log, *Z2_LINES[30:50])
    got += poll_all(t)
    assert seen(got) == replay(Z2_LINES[:30], "train.log") + replay(Z2_LINES[30:50], "train.log#1")


def test_non_utf8_bytes_and_overlong_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower_mod, "MAX_LINE_BYTES", 64)
    log = tmp_path / "train.log"
    t = tailer(tmp_path, str(log))
    long_line = b"x" * 200 + b"\n"
    append(log, Z2_LINES[0], b"caf\xe9 \xff\n", long_line[:100])
    got = poll_all(t)
    append(log, long_line[100:], Z2_LINES[1])
    got += poll_all(t)
    first = Z2_LINES[0].decode().rstrip("\n")
    assert [s[3] for s in seen(got)][1:] == ["caf\ufffd \ufffd", "x" * 64, seen(got)[3][3]]
    offsets = [s[2] for s in seen(got)]
    assert offsets == [0, len(first) + 1, len(first) + 1 + 7, len(first) + 1 + 7 + 201]
    assert [s[1] for s in seen(got)] == [1, 2, 3, 4]


def test_glob_finds_new_per_rank_logs_and_tags_their_rank(tmp_path: Path) -> None:
    logs = tmp_path / "rank_logs"
    logs.mkdir()
    t = tailer(tmp_path, str(logs / "*_rank*.log"))
    append(logs / "20261129141018_rank0.log", *Z2_LINES[:3])
    got = poll_all(t)
    append(logs / "20261129141018_rank1.log", *Z2_LINES[3:5])
    got += poll_all(t)
    assert [(r.src.file, r.src.rank) for r in got] == [
        ("20261129141018_rank0.log", 0),
        ("20261129141018_rank0.log", 0),
        ("20261129141018_rank0.log", 0),
        ("20261129141018_rank1.log", 1),
        ("20261129141018_rank1.log", 1),
    ]


def test_restart_resumes_from_the_state_file(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:100])
    t1 = tailer(tmp_path, str(log))
    got = poll_all(t1)
    append(log, *Z2_LINES[100:150], Z2_LINES[150][:10])
    got += poll_all(t1)
    t1.close()
    append(log, Z2_LINES[150][10:], *Z2_LINES[151:200])
    t2 = tailer(tmp_path, str(log))
    got += poll_all(t2)
    assert seen(got) == replay(Z2_LINES[:200], "train.log")


def test_uncommitted_lines_are_read_again_with_the_same_keys(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:100])
    t1 = tailer(tmp_path, str(log))
    committed = poll_all(t1)
    append(log, *Z2_LINES[100:150])
    lost = t1.poll().records  # read, but never delivered: the collector is killed here
    t2 = tailer(tmp_path, str(log))
    again = poll_all(t2)
    assert seen(again) == seen(lost) == replay(Z2_LINES[:150], "train.log")[100:]
    assert seen(committed + again) == replay(Z2_LINES[:150], "train.log")


def test_resume_keeps_the_step_clock_of_the_real_parsers(tmp_path: Path) -> None:
    """A restart mid-file gives the records an uninterrupted read gives, steps included."""
    log = tmp_path / "train.log"
    real = Tailer([str(log)], run="z2", node="n", state=StateFile(tmp_path / "a.json"))
    append(log, *Z2_LINES)
    expected = poll_all(real)
    log2 = tmp_path / "b" / "train.log"
    log2.parent.mkdir()
    append(log2, *Z2_LINES[:200])
    t1 = Tailer([str(log2)], run="z2", node="n", state=StateFile(tmp_path / "b.json"))
    got = poll_all(t1)
    append(log2, *Z2_LINES[200:])
    t2 = Tailer([str(log2)], run="z2", node="n", state=StateFile(tmp_path / "b.json"))
    got += poll_all(t2)
    assert got == expected
    timers = [r for r in got if isinstance(r, TimerRecord) and r.group == "global"]
    assert [r.step for r in timers] == list(range(1, 31))
    # a record read before the step clock resolved is sent at once without its step, and
    # once more with it (live mode): the only repeats, each first without, then with a step
    first: dict[object, Record] = {}
    for rec in got:
        key = record_key(rec)
        if key in first:
            assert first[key].step is None and rec.step is not None
        first[key] = rec
    assert 0 < len(got) - len(first) <= 5


DEFAULT_LEVEL_LINES = (DATA / "z0_default_loglevel" / "train.log").read_bytes().splitlines(True)


@pytest.mark.parametrize("redirect", [">>", ">"])
def test_copytruncate_at_the_default_log_level_keeps_numbering_steps(
    tmp_path: Path, redirect: str
) -> None:
    """After a copytruncate the file goes on with the same job's output, which at DeepSpeed's
    default log level names no step: the parser goes on from where it stood, across a
    restart too (the state file keeps what it started from). Found on a real job, whose
    timer lines after logrotate's copytruncate were stored with no step and no time.

    Under ``>`` the job writes on at its old offset: the file starts with a hole of NULs."""
    whole = tmp_path / "whole" / "train.log"
    whole.parent.mkdir()
    append(whole, *DEFAULT_LEVEL_LINES)
    truth = poll_all(Tailer([str(whole)], run="z0", node="n", state=StateFile(tmp_path / "w")))
    log = tmp_path / "train.log"
    cut = [i for i, line in enumerate(DEFAULT_LEVEL_LINES) if b"| fwd: " in line][9] + 1
    job = log.open("ab" if redirect == ">>" else "wb", buffering=0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[:cut]))
    t1 = Tailer([str(log)], run="z0", node="n", state=StateFile(tmp_path / "s.json"))
    got = poll_all(t1)
    shutil.copyfile(log, tmp_path / "train.log.1")
    os.truncate(log, 0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[cut : cut + 8]))
    got += poll_all(t1)
    t1.close()  # restarted: the generation after the truncation is resumed mid-file
    job.write(b"".join(DEFAULT_LEVEL_LINES[cut + 8 :]))
    job.close()
    hole = sum(map(len, DEFAULT_LEVEL_LINES[:cut])) if redirect == ">" else 0
    assert log.read_bytes()[: hole + 1] == b"\0" * hole + DEFAULT_LEVEL_LINES[cut][:1]
    t2 = Tailer([str(log)], run="z0", node="n", state=StateFile(tmp_path / "s.json"))
    got += poll_all(t2)
    steps = [r.step for r in got if isinstance(r, TimerRecord) and r.group == "global"]
    assert steps == [r.step for r in truth if isinstance(r, TimerRecord) and r.group == "global"]
    assert steps == list(range(1, 21))  # [train.py] step 1 ... step 20 in the log
    after = [r for r in got if r.src.file == "train.log#1"]
    assert after and all(r.ts is not None for r in after)
    assert [(r.step, r.ts, r.KIND) for r in after] == [
        (r.step, r.ts, r.KIND) for r in truth if r.src.line is not None and r.src.line > cut
    ]


def test_a_second_copytruncate_under_a_redirect_reads_what_only_the_copy_holds(
    tmp_path: Path,
) -> None:
    """After a first copytruncate under ``>`` the file starts with NULs, so its start no
    longer tells a second truncation (the job writes on past where it was read, at its own
    offset): what it wrote between the last read and the copy was in the copy alone, and
    lost. The bytes just before where reading stands tell it."""
    log = tmp_path / "train.log"
    timers = [i for i, line in enumerate(DEFAULT_LEVEL_LINES) if b"| fwd: " in line]
    first, second = timers[5] + 1, timers[12] + 1
    job = log.open("wb", buffering=0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[:first]))
    t = Tailer([str(log)], run="z0", node="n", state=StateFile(tmp_path / "s.json"))
    got = poll_all(t)
    shutil.copyfile(log, tmp_path / "train.log.1")
    os.truncate(log, 0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[first : second - 6]))
    got += poll_all(t)
    job.write(b"".join(DEFAULT_LEVEL_LINES[second - 6 : second]))  # not read before the copy
    (tmp_path / "train.log.1").rename(tmp_path / "train.log.2")
    shutil.copyfile(log, tmp_path / "train.log.1")
    os.truncate(log, 0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[second:]))
    job.close()
    got += poll_all(t)
    steps = [r.step for r in got if isinstance(r, TimerRecord) and r.group == "global"]
    assert steps == list(range(1, 21))


@pytest.mark.parametrize("restart", ["none", "before", "after"])
def test_a_file_truncated_then_renamed_goes_on_where_it_is_met(
    tmp_path: Path, restart: str
) -> None:
    """copytruncate, the job writing on, then a rename (a later rotation) before the next
    read: the file's new content is read at its new name, going on from the copy's end,
    whether the collector ran all along or was started again before or after the read that
    saw it. The globs are matched again once a second: the file at its new name is met in
    the read that saw it all the same. (The new file at the path after the rename is
    another generation, read afresh.)"""
    log = tmp_path / "train.log"
    timers = [i for i, line in enumerate(DEFAULT_LEVEL_LINES) if b"| fwd: " in line]
    a, b = timers[5] + 1, timers[12] + 1
    job = log.open("ab", buffering=0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[: a - 4]))

    def follow() -> Tailer:
        glob = str(tmp_path / "train.log*")
        state = StateFile(tmp_path / "s.json")
        return Tailer([glob], run="z0", node="n", state=state, clock=Clock())  # a frozen clock

    t = follow()
    got = poll_all(t)
    job.write(b"".join(DEFAULT_LEVEL_LINES[a - 4 : a]))  # only in the copy
    shutil.copyfile(log, tmp_path / "train.log-20261201")
    os.truncate(log, 0)
    job.write(b"".join(DEFAULT_LEVEL_LINES[a:b]))
    job.close()
    log.rename(tmp_path / "train.log.1")
    append(log, *DEFAULT_LEVEL_LINES[b:])
    if restart == "before":
        t.close()
        t = follow()
    got += poll_all(t)
    if restart == "after":
        t.close()
        append(log, b"")  # nothing new: the state file alone says where each file stands
        got += poll_all(follow())
    latest = {record_key(r): r for r in got}  # live: sent once unnumbered, then numbered
    steps = [
        r.step
        for r in latest.values()
        if isinstance(r, TimerRecord) and r.group == "global" and r.src.file != "train.log#1"
    ]
    assert steps == list(range(1, 14))  # 1-6 in train.log and its copy, 7-13 in train.log.1
    assert {r.src.file for r in latest.values() if r.step == 13} == {"train.log.1"}


@pytest.mark.parametrize(
    "carry",
    ['{"clock": {"rel": "x"}, "last_ts": null}', "[1, 2]", "{not json", '{"clock": 3}'],
)
def test_a_bad_parser_state_in_the_state_file_starts_the_parser_afresh(
    tmp_path: Path, carry: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A state file edited by hand (or of another version): warned, never a crash."""
    log = tmp_path / "train.log"
    append(log, *DEFAULT_LEVEL_LINES[:30])
    state = StateFile(tmp_path / "s.json")
    t1 = Tailer([str(log)], run="z0", node="n", state=state)
    poll_all(t1)
    shutil.copyfile(log, tmp_path / "train.log.1")
    os.truncate(log, 0)
    append(log, *DEFAULT_LEVEL_LINES[30:40])
    poll_all(t1)
    t1.close()
    text = (tmp_path / "s.json").read_text()
    good = json.loads(text)
    assert sum(p.get("carry", "") != "" for p in good["files"]) == 1
    for p in good["files"]:
        p["carry"] = carry if p.get("carry") else p.get("carry", "")
    (tmp_path / "s.json").write_text(json.dumps(good))
    append(log, *DEFAULT_LEVEL_LINES[40:])
    got = poll_all(Tailer([str(log)], run="z0", node="n", state=StateFile(tmp_path / "s.json")))
    assert "parser state not used" in caplog.text
    assert any(isinstance(r, TimerRecord) for r in got)  # read on, without the lost steps


def test_rotated_while_stopped_is_finished_from_the_saved_offset(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:40])
    t1 = tailer(tmp_path, str(log))
    got = poll_all(t1)
    t1.close()
    append(log, *Z2_LINES[40:55])
    log.rename(tmp_path / "train.log.1")
    append(log, *Z2_LINES[55:80])
    got += poll_all(tailer(tmp_path, str(log)))
    assert seen(got) == replay(Z2_LINES[:55], "train.log") + replay(Z2_LINES[55:80], "train.log#1")


def test_from_end_skips_what_is_there(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:100], Z2_LINES[100][:7])
    t = tailer(tmp_path, str(log), from_end=True)
    assert poll_all(t) == []
    append(log, Z2_LINES[100][7:], *Z2_LINES[101:110])
    assert seen(poll_all(t)) == replay(Z2_LINES[:110], "train.log")[100:]


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 1, "files": [{"path": 3}]}',
        '{"version": 1, "files": [{"path": "train.log", "gen": 0, "dev": 1, "ino": 2, '
        '"fp": "x", "fp_len": 0, "offset": "12", "line": 1}]}',
        '{"version": 1, "files": [',
        '{"version": 99}',
    ],
)
def test_corrupt_state_file_is_set_aside(tmp_path: Path, text: str) -> None:
    state = tmp_path / "state" / "tail.json"
    state.parent.mkdir()
    state.write_text(text)
    assert StateFile(state).load() == Checkpoint()
    assert (tmp_path / "state" / "tail.json.bad").exists()
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:3])
    assert len(poll_all(tailer(tmp_path, str(log)))) == 3


def test_state_file_round_trip(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, *Z2_LINES[:12])
    t = tailer(tmp_path, str(log))
    poll_all(t)
    ckpt = StateFile(tmp_path / "state" / "tail.json").load()
    (pos,) = ckpt.files
    assert (pos.path, pos.label, pos.gen, pos.line) == (str(log), "train.log", 0, 12)
    assert pos.offset == sum(len(x) for x in Z2_LINES[:12])
    assert pos.ino == log.stat().st_ino
    assert list(tmp_path.joinpath("state").iterdir()) == [tmp_path / "state" / "tail.json"]


def test_profile_file_is_reread_whole_when_rewritten(tmp_path: Path) -> None:
    out = tmp_path / "flops_profile.txt"
    clock = Clock()
    t = tailer(tmp_path, str(tmp_path / "none.log"), clock=clock, profile_files=[str(out)])
    text = PROFILE.read_bytes()
    out.write_bytes(text[: len(text) // 2])  # DeepSpeed is still printing into it
    assert poll_all(t) == []
    clock.now += PROFILE_SETTLE_S
    assert poll_all(t) == []  # settled but incomplete: no complete profile in it
    out.write_bytes(text)
    assert poll_all(t) == []
    clock.now += PROFILE_SETTLE_S
    (prof,) = poll_all(t)
    assert isinstance(prof, FlopsProfileRecord)
    # "Profile Summary at step 6:" and "params per GPU: 932.61 K" in the file.
    assert (prof.src.file, prof.profile_step, prof.params_per_gpu) == (
        "flops_profile.txt",
        6,
        932.61e3,
    )
    clock.now += PROFILE_SETTLE_S
    assert poll_all(t) == []
    # A restart does not send the same content again.
    t2 = tailer(tmp_path, str(tmp_path / "none.log"), clock=clock, profile_files=[str(out)])
    poll_all(t2)
    clock.now += PROFILE_SETTLE_S
    assert poll_all(t2) == []


@pytest.mark.parametrize("name", ["train.log", "20261129141018_rank1.log"])
def test_live_records_equal_those_of_dsmon_import(tmp_path: Path, name: str) -> None:
    """Live and replay share one parser: same records, same keys (a per-rank log's rank too)."""
    log = tmp_path / "z2" / name
    log.parent.mkdir()
    shutil.copyfile(DATA / "z2" / "train.log", log)
    imported = read_log(log, "z2")
    live = settled(Tailer([str(log)], run="z2").poll().records)
    assert live == imported
    assert len(live) == 118
    assert {r.src.rank for r in live} == ({0, None} if name == "train.log" else {0, 1})


def test_default_run_name_is_the_log_folder(tmp_path: Path) -> None:
    assert run_name(str(tmp_path / "exp1" / "train.log")) == "exp1"
    assert run_name(str(tmp_path / "exp2" / "rank_logs" / "*.log")) == "rank_logs"


def test_a_folder_with_glob_characters_names_the_run(tmp_path: Path) -> None:
    log = tmp_path / "run[1]" / "train.log"
    log.parent.mkdir()
    shutil.copyfile(DATA / "z2" / "train.log", log)
    # the file exists: its folder names the run (as dsmon import names it), not the fixed part
    # of the glob the path would be if it did not exist
    assert run_name(str(log)) == run_name(log.parent) == "run[1]"
    assert run_name(str(tmp_path / "run[2]" / "train.log")) == tmp_path.name


def test_watch_dirs_and_waker(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    t = tailer(
        tmp_path,
        str(tmp_path / "logs" / "*_rank*.log"),
        str(tmp_path / "runs" / "*" / "train.log"),
        str(tmp_path / "missing" / "deep" / "train.log"),
    )
    assert t.watch_dirs() == [(str(tmp_path), False), (str(tmp_path / "logs"), False)]
    wake = threading.Event()
    waker = Waker(wake)
    waker.dispatch(object())
    assert wake.is_set()
    wake.clear()
    if not waker.start(t.watch_dirs()):
        pytest.skip("no file-system watch here: the tailer polls")
    try:
        append(tmp_path / "logs" / "x_rank0.log", Z2_LINES[0])
        if not wake.wait(10):
            pytest.skip("file-system events are not delivered here: the tailer polls")
    finally:
        waker.stop()


def test_the_runs_ds_config_is_read_whole_and_again_when_changed(tmp_path: Path) -> None:
    """At DeepSpeed's default log level the log holds no config: the file is read instead."""
    cfg = tmp_path / "ds_config.json"
    shutil.copyfile(DATA / "z2" / "ds_config.json", cfg)
    clock = Clock()
    t = tailer(tmp_path, str(tmp_path / "none.log"), clock=clock, config_files=[str(cfg)])
    poll_all(t)
    clock.now += PROFILE_SETTLE_S
    (rec,) = poll_all(t)
    assert isinstance(rec, ConfigRecord) and rec.origin == "file"
    assert rec.config["zero_optimization"]["stage"] == 2 and rec.src.node == "n"
    clock.now += PROFILE_SETTLE_S
    assert poll_all(t) == []  # unchanged: nothing new
    cfg.write_text("{ not json")  # a broken edit is logged and skipped, never a crash
    poll_all(t)
    clock.now += PROFILE_SETTLE_S
    assert poll_all(t) == []


def test_a_trainer_dict_is_sent_once_the_bar_after_it_is_drawn(tmp_path: Path) -> None:
    """tests/data/hf_trainer_tqdm: the line after a Trainer's dict is tqdm's redraws, ended
    only by the next dict (minutes later in a real run). Its start, the bar drawn right after
    the dict (``5/40``), numbers the dict as soon as it is written, as a full read does."""
    data = (DATA / "hf_trainer_tqdm" / "train.log").read_bytes()
    dict_end = data.index(b"\n", data.index(b"{'loss'")) + 1
    bar_end = data.index(b"\r", dict_end + 1)  # "\r 12%|...| 5/40 [...]", then the next redraw
    log = tmp_path / "train.log"
    t = Tailer([str(log)], run="hf", node="n", state=StateFile(tmp_path / "s.json"))
    append(log, data[:dict_end])
    assert [r for r in poll_all(t) if isinstance(r, IterationRecord)] == []
    append(log, data[dict_end:bar_end])
    (rec,) = [r for r in poll_all(t) if isinstance(r, IterationRecord)]
    assert (rec.step, rec.loss, rec.total_iterations) == (5, 6.052, 40)
    append(log, data[bar_end:])
    rest = [r for r in poll_all(t) + t.release() if isinstance(r, IterationRecord)]
    whole = [
        r
        for r in read_log(DATA / "hf_trainer_tqdm" / "train.log", "hf")
        if isinstance(r, IterationRecord)
    ]
    assert [(r.src.line, r.step) for r in [rec, *rest]] == [(r.src.line, r.step) for r in whole]
