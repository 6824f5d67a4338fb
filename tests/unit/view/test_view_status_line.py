"""The pages' status line: where the run stands, each fact said once."""

from __future__ import annotations

from pathlib import Path

from locations import DATA
from shared_fixtures import read_log

from dsmon.health.model import Status
from dsmon.health.run_state import RunState, State, stored_state
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import open_store
from dsmon.view.run_state import status_line

INFO = RunInfo("r", "2026-11-29T14:10:00", "2026-11-29T14:11:07.941", 173_568, (), (0,), 50_550)


def test_a_record_that_ends_unwitnessed_names_its_last_step_once() -> None:
    state = RunState(
        State.ENDED,
        "the record ends without an exit status: the job was killed (SIGKILL, time limit, "
        "node loss) or the record is incomplete; last step 50,550",
        Status.WARN,
        False,
        names_last_step=True,
    )
    line = status_line(INFO, state)
    assert line.count("last step 50,550") == 1
    assert line.startswith("ended: the record ends without an exit status")
    assert " · node unknown · 1 rank(s) sent records · 173,568 records · " in line


def test_a_state_that_does_not_name_the_step_gets_it_from_the_store() -> None:
    state = RunState(State.FINISHED, "exit status 0", Status.PASS, False)
    assert status_line(INFO, state).startswith("finished: exit status 0 · last step 50,550 · ")
    assert " · last step 50,550 · " in status_line(INFO, None)


def test_a_real_record_cut_short_names_its_last_step_once(tmp_path: Path) -> None:
    """The first 70 records of a real run, imported: it ends with no end witnessed."""
    store = open_store(tmp_path / "s.sqlite")
    try:
        store.add(read_log(DATA / "z2" / "train.log", "z2")[:70])
        (info,) = store.runs()
        line = status_line(info, stored_state(store, "z2"))
    finally:
        store.close()
    assert line.startswith("ended: the record ends without an exit status")
    assert line.count("last step") == 1 and "last step 16" in line
