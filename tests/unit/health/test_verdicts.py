"""What is wrong with a real run, post-mortem: the headline, what must appear and what must not.

Real 2-rank DeepSpeed 0.19.8 jobs on the CPU accelerator:

- tests/data/verdict_slow_rank (``python tests/scenarios.py record slow_rank ...``, README.md):
  rank 1 sleeps 200 ms in every forward, engine timers on. Rank 0's timers hold its wait for
  rank 1 in ``bwd_allreduce`` (92 % of bwd); the probe on every rank tells the wire time (about
  7 % of a step) from the waiting (about 58 %).
- ../shared/corpus/ds-cpu/fp16_zero0 and fp16_zero2: fp16 with overflows. fp16 does not run on
  this project's CPU (no AVX512-FP16/AMX), so these are the shared corpus's real runs, made
  elsewhere (each folder's NOTES.md), not recorded by tests/scenarios.py.

Each is judged the two ways a finished run is: ``dsmon check FOLDER`` (records in memory) and
``dsmon import`` then ``dsmon check --store`` (the store's per-step figures); both must agree.
The live side of the slowed rank is tests/system/test_verdict_slow_rank.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from health_support import corpus_dir
from shared_fixtures import DATA

from cli.main import main
from dsmon.health.gather import inputs_from_store
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import CheckResult, Status
from dsmon.health.registry import evaluate
from dsmon.health.saved_output import inputs_from_paths
from dsmon.health.triage import Triage, causes, triage
from dsmon.load.files import import_paths
from dsmon.store.store import open_store

SLOW_RANK = DATA / "verdict_slow_rank"


def from_folder(folder: Path) -> HealthInputs:
    inputs, _ = inputs_from_paths([str(folder)])
    return inputs


def from_store(folder: Path, tmp_path: Path) -> HealthInputs:
    with open_store(tmp_path / "s.sqlite") as store:
        import_paths(store, [folder], run="run")
        return inputs_from_store(store, "run")


@pytest.fixture(scope="module", params=["folder", "store"])
def judged(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Triage, dict[str, CheckResult]]:
    """The slowed-rank run's checklist, post-mortem both ways: judged once for the tests that
    read it (each reads, none changes it)."""
    folder = SLOW_RANK
    inputs = (
        from_folder(folder)
        if request.param == "folder"
        else from_store(folder, tmp_path_factory.mktemp("judged"))
    )
    checklist = evaluate(inputs)
    return triage(checklist), {r.rule_id: r for r in checklist.results}


def test_a_slowed_rank_headlines_the_straggler(
    judged: tuple[Triage, dict[str, CheckResult]],
) -> None:
    laid, by_id = judged
    head = laid.headline()
    assert head.rule_id == "ranks.straggler"
    assert head.status in (Status.WARN, Status.FAIL)
    assert head.text.startswith("rank 1 is the slowest in 100% of steps; the others wait for it")
    evidence = dict(line.split(" = ", 1) for line in head.evidence_lines())
    assert evidence["slowest rank most often: rank 1"] == "38 of 38 steps (100%)"


def test_the_communication_rule_judges_the_wire_not_the_wait(
    judged: tuple[Triage, dict[str, CheckResult]],
) -> None:
    _, by_id = judged
    share = by_id["comm.share"]
    # rank 0's timers read far above the 25 % line; the wire time is well under it
    assert share.status is Status.PASS, share.summary
    assert share.summary.startswith("the wire time of collectives is ")
    assert "rank 0's timers show" in share.summary and "(see ranks.straggler)" in share.summary
    ev = {e.label: str(e.value) for e in share.evidence}
    wire = float(ev["wire time share p50"].rstrip("%"))
    timers = float(ev["rank 0's exposed comm share p50 (timers)"].rstrip("%"))
    wait = float(ev["waiting for the slowest rank p50"].rstrip("%"))
    assert wire < 15.0 < 40.0 < timers
    assert wait > 40.0
    assert share.fix is None
    # the all-reduce's share of bwd is judged without the wait (rank 0's 92 % is evidence)
    phase = by_id["comm.phase_share"]
    assert phase.summary.startswith("bwd_allreduce less waiting, share of bwd less waiting")
    assert "bwd_allreduce share of bwd, waiting included" in {e.label for e in phase.evidence}


def test_no_overlap_comm_from_the_communication_rules_on_the_cpu(
    judged: tuple[Triage, dict[str, CheckResult]],
) -> None:
    _, by_id = judged
    for rid in ("comm.share", "comm.phase_share", "comm.overlap"):
        assert "overlap_comm" not in (by_id[rid].fix or ""), rid
    assert "overlap_comm cannot hide them" in by_id["comm.phase_share"].summary


def test_post_mortem_folder_and_store_agree(tmp_path: Path) -> None:
    folder = evaluate(from_folder(SLOW_RANK))
    stored = evaluate(from_store(SLOW_RANK, tmp_path))
    assert [(r.rule_id, r.status, r.summary) for r in folder.results] == [
        (r.rule_id, r.status, r.summary) for r in stored.results
    ]


def test_dsmon_check_leads_with_the_headline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # rank 1 holds rank 0 up for over half of each step: a failure (on two ranks the score is
    # over the other rank's busy time; over their median it read 1.48, a warning)
    assert main(["check", str(SLOW_RANK)]) == 2
    lines = capsys.readouterr().out.splitlines()
    # under the subject: the run's state, then the headline
    assert (
        lines[1]
        == "Run state: finished: exit status 0 (the launcher: 2 worker(s) exited successfully)"
    )
    assert lines[3].startswith("What is wrong: FAIL ranks.straggler: rank 1 is the slowest in 100%")
    first = next(i for i, ln in enumerate(lines) if ln.startswith(("WARN  ", "FAIL  ")))
    assert lines[first].startswith("FAIL  ranks.straggler")
    store = tmp_path / "s.sqlite"
    assert main(["import", str(SLOW_RANK), "--store", str(store), "--run", "slow"]) == 0
    capsys.readouterr()
    assert main(["check", "--store", str(store), "--run", "slow", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["headline"]["id"] == "ranks.straggler"
    assert doc["headline"]["summary"].startswith("rank 1 is the slowest in 100% of steps")


@pytest.mark.parametrize("run", ["fp16_zero0", "fp16_zero2"])
def test_fp16_overflows_headline_the_skipped_steps(run: str, tmp_path: Path) -> None:
    """The measured overflows come before the config advice about the loss scaler."""
    for inputs in (from_folder(corpus_dir(run)), from_store(corpus_dir(run), tmp_path)):
        checklist = evaluate(inputs)
        laid = triage(checklist)
        by_id = {r.rule_id: r for r in checklist.results}
        head = laid.headline()
        assert head.rule_id == "loss_scale.skipped"
        assert head.status is by_id["loss_scale.skipped"].status
        assert head.status in (Status.WARN, Status.FAIL)
        order = [r.rule_id for r in laid.problems]
        config = [i for i, r in enumerate(laid.problems) if r.category == "config"]
        assert not config or order.index("loss_scale.skipped") < min(config)
        # must not: ZeRO-2's post-step all-gather read against fwd (it warned at 27 %), a
        # regression from noise, a straggler or a communication problem
        for rid in ("comm.phase_share", "comm.share", "steps.regression"):
            assert by_id[rid].status is not Status.WARN and by_id[rid].status is not Status.FAIL
        assert not causes(checklist)  # nothing here follows from another finding
    assert head.evidence_lines()[0].startswith("skipped steps = ")


@pytest.mark.parametrize(
    "folder", ["events_sigint_deepspeed", "events_crash_step17", "events_sigterm_rank"]
)
def test_an_ending_explains_no_communication_share(folder: str) -> None:
    """Real jobs on gloo (CPU), each with communication shares over 25 % before its end: one
    stopped by Ctrl-C, one crashed at step 17, one whose rank 1 got SIGTERM at step 12. The
    crashes' headlines said they "also explain" the shares, but the job stopped by Ctrl-C
    shows the same shares with no crash: they are measured over the steps that printed their
    timers, and an ending stops the step it hits before that step prints. Each share stands
    as a problem of its own."""
    laid = triage(evaluate(from_folder(DATA / folder)))
    head = laid.headline()
    assert head.rule_id == "run.state"
    assert [s.rule_id for s in head.symptoms] == ["run.errors"]
    shares = {r.rule_id for r in laid.problems if r.rule_id.startswith("comm.")}
    assert "comm.phase_share" in shares  # a problem of its own, not under the ending
