"""The run's state and its findings on real DeepSpeed jobs, after the fact (issue 38).

Each tests/data/verdict_<scenario>/ folder is a real 2-rank job of tests/e2e/train_tiny.py on
DeepSpeed 0.19.8's CPU accelerator, started through ``dsmon run`` and recorded by
``python tests/scenarios.py record`` (see each README). Post-mortem must find what a live look
found: ``dsmon check FOLDER`` (records read from the files), ``dsmon import`` (the store, its
summary's outcome) and the dashboard's replay all say the same state, with the finding that
heads the checklist and none of the findings that would mislead. The live side of the same
scenarios is tests/system/test_verdicts_live.py.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest
from shared_fixtures import DATA

from dsmon.analysis.summary import summary_text
from dsmon.health import evaluate
from dsmon.health.model import CheckResult, Status
from dsmon.health.run_state import State, judge, stored_state
from dsmon.health.saved_output import inputs_from_paths
from dsmon.load.files import import_paths
from dsmon.store.store import open_store
from dsmon.view import ranks as rank_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import step_cutoff
from dsmon.view.health_panel import panel, run_state

#: The runtime rules whose verdicts tell a run's state.
RUNTIME = ("run.state", "run.errors", "run.stalled", "ranks.hang")


def folder(scenario: str) -> Path:
    return DATA / f"verdict_{scenario}"


def checked(scenario: str) -> dict[str, CheckResult]:
    """The checklist ``dsmon check tests/data/verdict_<scenario>`` prints, by rule id."""
    inputs, _ = inputs_from_paths([str(folder(scenario))])
    return {r.rule_id: r for r in evaluate(inputs).results}


def state_line(scenario: str) -> str:
    inputs, _ = inputs_from_paths([str(folder(scenario))])
    return judge(inputs).line()


def imported(scenario: str, tmp_path: Path) -> tuple[str, str]:
    """``dsmon import``'s outcome line and the stored run's state line."""
    with open_store(tmp_path / "s.sqlite") as store:
        (res,) = import_paths(store, [folder(scenario)], run=scenario)
        line = stored_state(store, scenario, datetime.now()).line()
        outcome = next(
            x for x in summary_text(store, scenario, line).splitlines() if x.startswith("Outcome")
        )
    return outcome, line


def failing(results: dict[str, CheckResult]) -> set[str]:
    return {rid for rid, r in results.items() if r.status is Status.FAIL}


def worst_first(results: dict[str, CheckResult]) -> list[str]:
    """Rule ids by severity (fail first), in rule order within a status: the headline's order."""
    ranked = sorted(results.values(), key=lambda r: -r.status.severity)
    return [r.rule_id for r in ranked]


def test_healthy_run_finished_and_nothing_runtime_fails(tmp_path: Path) -> None:
    found = checked("healthy")
    assert found["run.state"].summary == (
        "finished: exit status 0 (dsmon run: the job ended with status 0)"
    )
    assert {rid: found[rid].status for rid in RUNTIME} == dict.fromkeys(RUNTIME, Status.PASS)
    assert found["ranks.hang"].summary == "all 2 ranks exited normally"
    assert not failing(found)
    assert not [r for r in found.values() if "killed" in r.summary]
    # the probe times every rank's phases: no "dsmon cannot chart step time" on a dsmon run
    assert found["observe.wall_clock_breakdown"].status is Status.PASS
    assert "per-rank probe" in found["observe.wall_clock_breakdown"].summary
    outcome, line = imported("healthy", tmp_path)
    assert line == found["run.state"].summary
    assert outcome == f"Outcome     {line}"


def test_hung_then_killed_run_is_found_hung_after_the_fact(tmp_path: Path) -> None:
    """Rank 1 stopped (SIGSTOP) after step 20; the job was SIGKILLed 45 s after rank 1's last
    heartbeat, dsmon run with it: no exit line at all. Live, ranks.hang failed; after the fact
    it said "PASS No rank is hung" or could not tell."""
    found = checked("hang_then_kill")
    hang = found["ranks.hang"]
    assert hang.status is Status.FAIL
    assert hang.summary.startswith("rank 1 sent no heartbeat for ")
    assert "before the record ends (stopped or hung), last seen in " in hang.summary
    assert "; waiting: rank 0 in backward's all_reduce of step 21 for " in hang.summary
    seconds = int(hang.summary.removeprefix("rank 1 sent no heartbeat for ").split(" ")[0])
    assert 40 <= seconds <= 60  # the 45 s the job hung before it was killed
    assert "NCCL" not in hang.summary + (hang.fix or "")  # a gloo job
    state = found["run.state"]
    assert state.status is Status.FAIL and state.summary == f"hung: {hang.summary}"
    assert found["run.stalled"].status is Status.FAIL  # the symptom, under its cause
    errors = found["run.errors"]
    assert errors.status is Status.WARN and "without the launcher's exit lines" in errors.summary
    # the hang leads: the state, the hang and its symptom fail, before any config advice
    assert worst_first(found)[0] == "run.state"
    assert failing(found) == {"run.state", "ranks.hang", "run.stalled"}
    outcome, line = imported("hang_then_kill", tmp_path)
    assert line == state.summary and outcome == f"Outcome     {line}"


def test_sigkilled_rank_is_named_first_and_its_victim_apart(tmp_path: Path) -> None:
    """Rank 1 was SIGKILLed after step 12; rank 0 then failed on 'Connection closed by peer'.
    The fix said "read the first traceback", which is rank 0's, the victim's."""
    found = checked("sigkill_rank")
    errors = found["run.errors"]
    assert errors.status is Status.FAIL
    assert errors.summary.startswith(
        "rank 1 died first: killed by signal 9 (SIGKILL), no traceback, last heard in step "
    )
    assert "; then rank 0 failed because a peer was gone (RuntimeError: " in errors.summary
    assert re.search(r"Connection (closed|reset) by peer", errors.summary)  # gloo's words
    assert "pytorch/third_party" not in errors.summary  # a build machine's path, left out
    died = next(e for e in errors.evidence if e.label == "rank 1 died first")
    assert died.value == "signal 9 (SIGKILL)" and "return code = -9" in died.where
    fix = errors.fix or ""
    assert "out-of-memory killer" in fix and "rank 1's node" in fix
    assert "read the first traceback" not in fix
    state = found["run.state"]
    assert state.status is Status.FAIL and state.summary.startswith("crashed: rank 1 died first")
    assert found["ranks.hang"].status is Status.PASS  # it died, it did not hang
    assert found["run.stalled"].status is Status.PASS
    assert worst_first(found)[0] == "run.state"
    assert failing(found) == {"run.state", "run.errors"}
    outcome, line = imported("sigkill_rank", tmp_path)
    assert line == state.summary and outcome == f"Outcome     {line}"


def test_silent_start_finished_and_is_never_called_killed(tmp_path: Path) -> None:
    """Every rank waited 120 s between initialize and step 1, silently; its probe heartbeated
    through it (init, then idle), so nothing says killed, hung or stalled."""
    found = checked("silent_start")
    assert found["run.state"].summary == (
        "finished: exit status 0 (dsmon run: the job ended with status 0)"
    )
    assert {rid: found[rid].status for rid in RUNTIME} == dict.fromkeys(RUNTIME, Status.PASS)
    assert not [r for r in found.values() if "killed" in r.summary]
    outcome, line = imported("silent_start", tmp_path)
    assert line == found["run.state"].summary


def test_the_silent_start_heartbeats_from_initialize_on() -> None:
    """The probe's heartbeats cover the 120 s before step 1: built (init), then idle."""
    import json

    beats = [
        json.loads(x)
        for x in (folder("silent_start") / "probe" / "rank-1.jsonl").read_text().splitlines()
    ]
    phases = [b["phase"] for b in beats if b["kind"] == "heartbeat"]
    assert phases[0] == "init" and "idle" in phases
    idle = [b for b in beats if b["kind"] == "heartbeat" and b["phase"] == "idle"]
    span = datetime.fromisoformat(idle[-1]["ts"]) - datetime.fromisoformat(idle[0]["ts"])
    assert span.total_seconds() >= 110  # a heartbeat every 5 s through the silent start
    first = next(b for b in beats if b["kind"] == "rank_step")
    assert first["step"] == 1 and first["total_ms"] < 10_000  # the wait is no part of step 1


def replay(scenario: str, tmp_path: Path, step: int) -> tuple[dict[str, CheckResult], str]:
    """The dashboard's checklist and state line as of ``step`` of an imported scenario."""
    with open_store(tmp_path / "r.sqlite") as store:
        import_paths(store, [folder(scenario)], run=scenario)
        frames = RunFrames(store, scenario)
        cutoff = step_cutoff(
            rank_views.stats(frames, step_cutoff(frames.frame("step"), None)), step
        )
        results = panel(frames, scenario, cutoff, datetime.now()).checklist.results
        line = run_state(frames, scenario, cutoff, datetime.now()).line()
    return {r.rule_id: r for r in results}, line


@pytest.mark.parametrize("scenario", ["sigkill_rank", "hang_then_kill"])
def test_replay_shows_nothing_that_happened_after_its_step(scenario: str, tmp_path: Path) -> None:
    """As of step 5 both runs were training: no traceback printed later, no hang, no crash."""
    found, line = replay(scenario, tmp_path, 5)
    assert line.startswith("training: step 5"), line
    assert found["run.errors"].status is Status.PASS, found["run.errors"].summary
    assert found["ranks.hang"].status is Status.PASS, found["ranks.hang"].summary
    assert found["run.state"].status is Status.PASS
    assert not [r for r in found.values() if "SIGKILL" in r.summary or "peer" in r.summary]


def test_replay_at_the_hang_finds_the_hang(tmp_path: Path) -> None:
    """As of the last step rank 0 made, live had not yet seen the hang (it came after)."""
    found, _ = replay("hang_then_kill", tmp_path, 20)
    assert found["ranks.hang"].status is Status.PASS


def test_states_of_the_scenarios() -> None:
    """The state each scenario is left in, as every surface says it."""
    states = {s: state_line(s).split(":")[0] for s in SCENARIOS}
    assert states == SCENARIOS


SCENARIOS = {
    "healthy": State.FINISHED.value,
    "hang_then_kill": State.HUNG.value,
    "sigkill_rank": State.CRASHED.value,
    "silent_start": State.FINISHED.value,
    "ctrl_c": State.ENDED.value,
}


def test_ctrl_c_is_a_stop_though_a_rank_failed_on_the_closed_connection() -> None:
    """tests/data/verdict_ctrl_c: Ctrl-C after step 15. The launcher killed rank 0 at once, so
    rank 1 failed on the closed connection (line 44) before its own KeyboardInterrupt: it read
    "crashed: rank 0 stopped first ...; then rank 1 failed because a peer was gone". dsmon
    run gave the job time to end by itself: its status is the launcher's SIGINT, not -15."""
    line = state_line("ctrl_c")
    assert line == (
        "ended: stopped from outside by SIGINT (Ctrl-C), no worker failed (DeepSpeed's "
        "launcher got SIGINT; dsmon run: the job ended with status -2)"
    )
    inputs, _ = inputs_from_paths([str(folder("ctrl_c"))])
    errors = {r.rule_id: r for r in evaluate(inputs).results}["run.errors"]
    assert errors.status is Status.WARN
    assert errors.summary.endswith(
        "no worker failed; 1 error(s) only say a peer was gone as the workers were stopped"
    )
