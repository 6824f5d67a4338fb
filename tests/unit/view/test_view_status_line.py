"""The pages' status line: where the run stands, each fact said once."""

from __future__ import annotations

from dsmon.health.model import Status
from dsmon.health.run_state import RunState, State
from dsmon.store.records.runs import RunInfo
from dsmon.view.run_state import status_line

INFO = RunInfo("r", "2026-11-29T14:10:00", "2026-11-29T14:11:07.941", 173_568, (), (0,), 50_550)


def test_a_record_that_ends_unwitnessed_names_its_last_step_once() -> None:
    state = RunState(
        State.ENDED,
        "the record ends without an exit status: the job was killed (SIGKILL, time limit, "
        "node loss) or the record is incomplete; last step 50,550",
        Status.WARN,
        False,
    )
    line = status_line(INFO, state)
    assert line.count("last step 50,550") == 1
    assert line.startswith("ended: the record ends without an exit status")
    assert " · node unknown · 1 rank(s) sent records · 173,568 records · " in line


def test_a_state_that_does_not_name_the_step_gets_it_from_the_store() -> None:
    state = RunState(State.FINISHED, "exit status 0", Status.PASS, False)
    assert status_line(INFO, state).startswith("finished: exit status 0 · last step 50,550 · ")
    assert " · last step 50,550 · " in status_line(INFO, None)
