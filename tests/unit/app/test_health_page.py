"""The dashboard's health page (pages/health.py) on a store filled from real corpus runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from dashboard_support import app_at
from health_support import corpus_dir
from shared_fixtures import DATA
from streamlit.testing.v1 import AppTest

from dsmon.load.files import import_paths
from dsmon.store.store import open_store


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("health") / "store.sqlite"
    with open_store(path) as s:
        import_paths(s, [corpus_dir("fp16_zero2")], run="fp16_zero2")
        import_paths(s, [corpus_dir("crash_step17")], run="crash_step17")
        import_paths(s, [DATA / "config_v03_issue679"], run="dump_cut_short")
    return str(path)


@pytest.fixture
def store(stored: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store the dashboard opens (app.py reads $DSMON_STORE)."""
    monkeypatch.setenv("DSMON_STORE", stored)
    return stored


def labels(at: AppTest) -> list[str]:
    return [e.label for e in at.expander]


def test_checklist_of_fp16_run(store: str) -> None:
    at = app_at(store, "fp16_zero2", "health")
    assert not at.exception
    assert at.header[0].value == "Health · fp16_zero2"
    metrics = {m.label: m.value for m in at.metric}
    # 25 rules do not apply (ZeRO-3 keys on stage 2, GPU rules, MFU and overlap_comm on a CPU
    # run...): not passes.
    # comm.phase_share passes: ZeRO-2's all-gather is no longer divided by fwd (it read 27 %);
    # run.state passes: the run finished
    # observe.unread_lines passes: every line of a kind dsmon reads was read
    assert metrics == {"Fail": "1", "Warn": "0", "Unknown": "1", "Pass": "23", "N/A": "25"}
    skipped = (
        ":red-badge[FAIL] **Few optimizer steps are skipped for overflow** `loss_scale.skipped`"
    )
    # what the run did comes first, its worst problem on top; config advice after it
    assert labels(at)[0] == skipped
    head = at.error[0].value
    assert head.startswith(
        "**What is wrong with this run:** :red-badge[FAIL] `loss_scale.skipped` 4 of 25 steps"
    )
    assert "- skipped steps = 4 (step line at step 25)" in head
    text = "\n".join(str(m.value) for m in at.markdown)
    assert "4 of 25 steps skipped (16.0%): look for inf/nan sources" in text
    assert "- skipped steps = 4 (step line at step 25)" in text
    codes = [c.value for c in at.code]
    assert '{"zero_optimization": {"overlap_comm": true}}' not in codes  # no streams on a CPU
    assert [s.value for s in at.subheader] == ["Run", "GPUs", "Configuration"]
    # configuration: 26 rules = 14 passes + 12 that do not apply
    assert ":green-badge[PASS] 14 rules pass" in labels(at)
    assert ":blue-badge[N/A] 12 rules do not apply to this run" in labels(at)
    assert ":blue-badge[N/A] 5 rules do not apply to this run" in labels(at)  # GPUs, CPU run
    assert "- **No ECC or XID errors** `gpu.errors`: CPU run (no GPUs)" in text
    assert "- **ZeRO-3 persists only small parameters** `zero3.param_persistence_threshold`" in (
        text
    )
    assert (
        "- **Every key is a real DeepSpeed option** `schema.keys`: every key is a DeepSpeed option"
        in text
    )
    assert "DeepSpeed 0.19.8, 2 rank(s) on 1 node(s), cpu" in at.caption[1].value


def test_crash_is_shown_with_a_link_to_its_chart(store: str) -> None:
    at = app_at(store, "crash_step17", "health")
    assert not at.exception
    # the run's state leads; the crash's details (run.errors) follow from it, inside it
    assert labels(at)[0] == ":red-badge[FAIL] **What the run is doing** `run.state`"
    text = "\n".join(str(m.value) for m in at.markdown)
    assert "**Follows from it:** :red-badge[FAIL] **No worker crashed** `run.errors`" in text
    links = [(p.label, p.proto.page) for p in at.get("page_link")]  # type: ignore[attr-defined]
    assert ("See the chart: steps", "steps") in links
    assert ("See the chart: communication", "communication") in links


def test_rules_that_could_not_tell_are_listed_together_with_what_they_saw(store: str) -> None:
    # A DeepSpeed 0.3 config dump cut short: no run, no usable config; no rule can tell.
    at = app_at(store, "dump_cut_short", "health")
    assert not at.exception
    unknown = [label for label in labels(at) if label.startswith(":gray-badge[UNKNOWN]")]
    # one list per section, never a box per rule (40 boxes buried the page and cost a
    # browser 0.2 s to draw at every visit)
    assert unknown == [
        ":gray-badge[UNKNOWN] 9 rules could not tell",  # the run
        ":gray-badge[UNKNOWN] 5 rules could not tell",  # GPUs
        ":gray-badge[UNKNOWN] 26 rules could not tell",  # the configuration
    ], labels(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Unknown"] == "40"
    text = "\n".join(str(m.value) for m in at.markdown)
    # each rule says why it could not tell; the run's state keeps its evidence and its fix
    state = next(line for line in text.splitlines() if "`run.state`" in line)
    assert state.startswith("- **What the run is doing** `run.state`: ended: "), state
    assert "    - exit status = none (launcher, dsmon run, the probe's heartbeats)" in text
    assert "    - fix: `run the job under dsmon run, or with dsmon's probe," in text
    assert "- **Model FLOPs utilisation is at least 30 %** `flops.mfu`: " in text


def test_replay_position_changes_the_verdicts(store: str) -> None:
    # At step 5 no overflow had happened yet (the first is at step 8).
    at = app_at(store, "fp16_zero2", "health", step="5")
    assert not at.exception
    text = "\n".join(str(m.value) for m in at.markdown)
    assert "0 of 5 steps skipped (0.0%)" in text
    # the run's state as of step 5, as a live look then would have said it: still training
    assert at.caption[0].value.startswith("training: step 5 · last step 25 · ")
    assert Path(str(at.caption[1].value)).name  # subject line rendered


def test_a_live_launched_run_is_not_reported_killed(tmp_path: Path) -> None:
    """The launcher prints its exit lines only at the end: a running job has none yet."""
    from datetime import datetime

    from dsmon.view.cache import RunFrames
    from dsmon.view.cutoff import OPEN
    from dsmon.view.health_panel import panel

    lines = (DATA / "z2" / "train.log").read_text(encoding="utf-8").splitlines(keepends=True)
    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    log.write_text("".join(ln for ln in lines if "exits successfully" not in ln))
    with open_store(tmp_path / "s.sqlite") as s:
        import_paths(s, [log], run="saved")  # imported: a complete record, judged as of its end
        records = list(s.scan("saved", "event")) + list(s.scan("saved", "timer"))
        s.add([dataclasses.replace(r, src=dataclasses.replace(r.src, run="run")) for r in records],
              live=True)  # fmt: skip
        saved = panel(RunFrames(s, "saved"), "saved", OPEN, datetime.now()).checklist.results
        live = panel(RunFrames(s, "run"), "run", OPEN, datetime.now()).checklist.results
    replayed = {r.rule_id: r for r in saved}
    going = {r.rule_id: r for r in live}
    assert "killed" in replayed["run.errors"].summary  # a finished log without exit lines
    assert replayed["run.state"].summary.startswith("ended: the record ends without an exit")
    # the same records delivered live by a collector: the job may still be running
    assert going["run.errors"].status.value == "pass", going["run.errors"].summary
    assert going["run.state"].summary.startswith(("training: ", "silent: "))


def test_every_rule_that_reads_the_clock_is_evaluated_live() -> None:
    import inspect

    from dsmon.health.live import CLOCK_RULES
    from dsmon.health.registry import all_rules

    reads_now = {r.id for r in all_rules() if "inputs.now" in inspect.getsource(r.func)}
    # or in the judges they call: the state, the stall and hang judges, _clean_end
    judges = ("judge(", "judge_hang(", "judge_stall(", "_clean_end(")
    calls = {r.id for r in all_rules() if any(j in inspect.getsource(r.func) for j in judges)}
    assert reads_now | calls == set(CLOCK_RULES)


def test_timer_lines_without_a_time_show_a_live_run_going_on(tmp_path: Path) -> None:
    """At DeepSpeed's default log level the timer lines carry a start-up line's time
    (tests/data/z0_default_loglevel: 14:10:05): a live run whose GPUs were sampled just now
    was judged stalled since then. The dashboard counts when a refresh brought them."""
    from datetime import datetime

    from dashboard_support import read_records

    from dsmon.model.records import GpuSampleRecord, Source, TimerRecord
    from dsmon.view.cache import RunFrames
    from dsmon.view.cutoff import OPEN
    from dsmon.view.health_panel import panel

    recs = [r for r in read_records("z0_default_loglevel", "z0") if r.KIND != "event"]
    globals_at = [
        i for i, r in enumerate(recs) if isinstance(r, TimerRecord) and r.group == "global"
    ]
    cut = globals_at[9] + 1
    assert {r.ts for r in recs if isinstance(r, TimerRecord)} == {"2026-11-29T14:10:05.577"}

    def sampled_now() -> GpuSampleRecord:
        now = datetime.now().isoformat(timespec="milliseconds")
        return GpuSampleRecord(src=Source(run="z0", node="n1"), ts=now, gpu_index=0, name="H100")

    with open_store(tmp_path / "s.sqlite") as s:
        s.add([*recs[:cut], sampled_now()], live=True)
        frames = RunFrames(s, "z0")
        panel(frames, "z0", OPEN, datetime.now())  # the first look
        s.add([*recs[cut:], sampled_now()], live=True)
        frames.refresh()
        stalled = {
            r.rule_id: r for r in panel(frames, "z0", OPEN, datetime.now()).checklist.results
        }
    assert stalled["run.stalled"].status.value == "pass", stalled["run.stalled"].summary
