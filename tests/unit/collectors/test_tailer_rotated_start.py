"""A collector started after a rotation: the log's files followed oldest first, as one output.

tests/data/rotated_copytruncate is a real job at DeepSpeed's default log level rotated by
copytruncate mid-run: ``train.log.1`` holds steps 1-79, ``train.log`` (after a hole of NUL
bytes) steps 80-100, whose lines name no step. A collector whose glob matches both, started
after the rotation, used to read them apart: ``train.log``'s steps stayed unknown.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from shared_fixtures import DATA

from collectors.tail.state import StateFile
from collectors.tail.tailer import Tailer
from dsmon.load.files import import_paths, read_found
from dsmon.load.kinds import discover
from dsmon.model.records import Record, TimerRecord, record_key
from dsmon.parse.base import Diagnostics
from dsmon.store.store import Store

ROTATED = DATA / "rotated_copytruncate"
Z2 = (DATA / "z2" / "train.log").read_bytes()


def collect(folder: Path, pattern: str, polls: int = 3) -> list[Record]:
    t = Tailer([str(folder / pattern)], run="rot", node=None, state=StateFile(folder / "s.json"))
    out: list[Record] = []
    for _ in range(polls):
        batch = t.poll()
        t.commit(batch.checkpoint)
        out += batch.records
    out += t.release()
    t.close()
    return out


def global_steps(records: list[Record]) -> list[tuple[str | None, int | None]]:
    timers = [r for r in records if isinstance(r, TimerRecord) and r.group == "global"]
    return [(r.src.file, r.step) for r in timers]


def test_started_after_a_rotation_numbers_the_live_files_steps_on(
    tmp_path: Path, store: Store
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("train.log.1", "train.log"):
        shutil.copyfile(ROTATED / name, logs / name)
    got = collect(logs, "train.log*")
    steps = global_steps(got)
    assert [s for _, s in steps] == list(range(1, 101))
    assert {f for f, s in steps if s is not None and s >= 80} == {"train.log"}
    (res,) = import_paths(store, [ROTATED], run="rot")
    imported = {
        record_key(r): (r.step, r.ts) for k in ("timer", "event") for r in store.scan(res.run, k)
    }
    live = {record_key(r): (r.step, r.ts) for r in got if r.KIND in ("timer", "event")}
    assert live == imported  # what dsmon import of the folder stores, key for key


def test_each_file_waits_for_the_one_before_it(tmp_path: Path) -> None:
    """Files matched in one scan are followed oldest first whatever their names sort as."""
    logs = tmp_path / "logs"
    logs.mkdir()
    whole = (ROTATED / "train.log.1").read_bytes()
    cut = whole.index(b"| fwd: ", len(whole) // 2)
    cut = whole.index(b"\n", cut) + 1
    (logs / "train.log.2").write_bytes(whole[:cut])
    (logs / "train.log.1").write_bytes(whole[cut:])
    shutil.copyfile(ROTATED / "train.log", logs / "train.log")
    got = collect(logs, "train.log*")
    assert [s for _, s in global_steps(got)] == list(range(1, 101))
    assert [f for f, _ in global_steps(got)][0] == "train.log.2"


def test_a_copy_met_with_its_live_file_before_the_truncation_is_left_alone(
    tmp_path: Path,
) -> None:
    """copytruncate's copy exists and the live file is not truncated yet: the live file is
    the one followed, so nothing is read twice, and what the job writes next is read."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = Z2.splitlines(keepends=True)
    (logs / "train.log").write_bytes(b"".join(lines[:150]))
    shutil.copyfile(logs / "train.log", logs / "train.log.1")
    t = Tailer([str(logs / "train.log*")], run="rot", node=None, state=StateFile(tmp_path / "s"))
    first = t.poll().records
    with (logs / "train.log").open("ab") as f:
        f.write(b"".join(lines[150:]))
    rest = t.poll().records + t.poll().records + t.release()
    got = first + rest
    assert {r.src.file for r in got} == {"train.log"}
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "train.log").write_bytes(Z2)
    once = collect(alone, "train.log*")
    assert {record_key(r) for r in got} == {record_key(r) for r in once}  # read once, whole


def test_from_end_skips_both_files_even_when_the_older_one_ends_mid_line(tmp_path: Path) -> None:
    """``--from-end``: what the files hold at start is skipped. A copytruncate copy may end in
    the middle of a line; the live file waits for the copy to be read, and must still be
    skipped to its end when it is followed a scan later."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.log.1").write_bytes((ROTATED / "train.log.1").read_bytes()[:-10])
    live = (ROTATED / "train.log").read_bytes()
    half = live.index(b"\n", len(live) // 2) + 1
    (logs / "train.log").write_bytes(live[:half])
    state = StateFile(tmp_path / "s.json")
    t = Tailer([str(logs / "train.log*")], run="rot", node=None, state=state, from_end=True)
    early = t.poll().records + t.poll().records
    with (logs / "train.log").open("ab") as f:
        f.write(live[half:])
    late = t.poll().records + t.poll().records
    assert early == []
    assert late and all((r.src.offset or 0) >= half for r in late)
    assert {r.src.file for r in late} == {"train.log"}
    alone = tmp_path / "import"
    alone.mkdir()
    for name in ("train.log.1", "train.log"):
        shutil.copyfile(logs / name, alone / name)
    carries: dict[str, dict[str, object]] = {}
    whole = [
        r for f in discover(alone) for r in read_found(f, "rot", Diagnostics(), carries=carries)
    ]
    truth = [(f, s) for f, s in global_steps(whole) if f == "train.log"]
    assert global_steps(late) == truth  # numbered on from the copy, its cut last line too
    assert [s for _, s in truth] == list(range(80, 101))
