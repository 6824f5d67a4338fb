"""run.errors and the batch rule on real Trainer runs (tests/data/hf_trainer_*) and crash logs."""

from __future__ import annotations

from field_logs import field_path
from health_support import check, evidence
from shared_fixtures import DATA

from dsmon.health.gather import inputs_from_records
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import EventRecord, Record
from dsmon.parse.base import Diagnostics
from dsmon.parse.log import parse_text


def records(path: object) -> list[Record]:
    return [r for f in discover(path) for r in read_found(f, "hf", Diagnostics())]  # type: ignore[arg-type]


def test_abort_at_exit_after_training_is_named() -> None:
    """hf_trainer_timers line 131: ``terminate called without an active exception``, then the
    launcher's ``exits with return code = -6``, after the end-of-training dict (line 130)."""
    recs = records(DATA / "hf_trainer_timers" / "train.log")
    (abort,) = [r for r in recs if isinstance(r, EventRecord) and r.name == "traceback"]
    assert abort.src.line == 131 and abort.detail["native"] is True
    assert abort.detail["what"] == "without an active exception"
    errors = check(inputs_from_records(recs, run="hf"), "run.errors")
    assert errors.status.name == "FAIL"
    assert "training itself had ended" in errors.summary
    assert evidence(errors)["worker exit code"] == "-6 (SIGABRT) (launcher)"


def test_auto_batch_keys_of_a_trainer_config_pass() -> None:
    """The Trainer's ds_config says ``"auto"`` for the batch keys: it fills them in."""
    recs = records(DATA / "hf_trainer_tqdm")
    finding = check(inputs_from_records(recs, run="hf"), "batch.arithmetic")
    assert finding.status.name == "PASS" and '"auto"' in finding.summary
    assert evidence(finding)["train_batch_size"] == "auto (config)"


def test_a_worker_killed_without_traceback_points_at_the_signal() -> None:
    """Field excerpt 45 (2023): ``exits with return code = -9`` and no traceback."""
    errors = check(inputs_from_records(records(field_path(45)), run="f"), "run.errors")
    assert errors.status.name == "FAIL"
    assert evidence(errors)["worker exit code"] == "-9 (SIGKILL) (launcher)"
    assert "no traceback" in (errors.fix or "") and "out-of-memory killer" in (errors.fix or "")


def test_workers_the_launcher_killed_are_no_clean_end() -> None:
    """Field excerpt 54 (2023): only ``Killing subprocess`` lines (sigkill_handler), no exit code."""
    errors = check(inputs_from_records(records(field_path(54)), run="f"), "run.errors")
    assert errors.status.name == "WARN"
    assert "the launcher killed 2 worker(s)" in errors.summary


def test_error_lines_without_launcher_exit_lines_fail() -> None:
    """tests/data/events_failures: NCCL watchdog and OOM logs, none with the launcher's exit
    lines (torchrun, a single process): run.errors could not be evaluated (KeyError)."""
    errors = check(inputs_from_records(records(DATA / "events_failures"), run="f"), "run.errors")
    assert errors.status.name == "FAIL", errors.summary
    # every error is a watchdog timeout, the waiting ranks' symptom: no rank is blamed for it
    assert errors.summary.startswith("rank 1, rank 0, rank 2 and 3 more failed waiting for a peer")
    assert "no rank's own failure is in the record; 10 error event(s), 0 failed worker(s)" in (
        errors.summary
    )


def test_steps_per_print_of_a_trainer_run_does_not_apply() -> None:
    """Accelerate sets steps_per_print to inf (hf_trainer_info line 178, its dumped config):
    the config file's 5 printed nothing, and asking for it again would change nothing."""
    for folder in ("hf_trainer_tqdm", "hf_trainer_info/train.log"):
        finding = check(
            inputs_from_records(records(DATA / folder), run="hf"), "observe.steps_per_print"
        )
        assert finding.status.name == "NOT_APPLICABLE", (folder, finding.summary)
        assert "sets steps_per_print to inf" in finding.summary
    z2 = check(inputs_from_records(records(DATA / "z2"), run="z2"), "observe.steps_per_print")
    assert z2.status.name == "PASS"


def test_a_trainer_run_dump_holds_the_batch_keys_it_filled_in() -> None:
    """hf_trainer_info's log alone: the dumped user config says train_batch_size 8 (4 x 1 x 2)."""
    recs = records(DATA / "hf_trainer_info" / "train.log")
    finding = check(inputs_from_records(recs, run="hf"), "batch.arithmetic")
    assert finding.status.name == "PASS" and finding.summary == "batch keys agree"
    assert evidence(finding)["train_batch_size"].startswith("8")


def test_a_diverged_trainer_run_fails_loss_finite() -> None:
    """hf_trainer_v4_diverged: every log dict has ``'grad_norm': inf`` (step 5 on)."""
    recs = records(DATA / "hf_trainer_v4_diverged" / "train.log")
    finite = check(inputs_from_records(recs, run="hf"), "loss.finite")
    assert finite.status.name == "FAIL"
    assert finite.summary.startswith(
        "NaN or inf since step 5, still in the latest interval (step 40)"
    )
    assert evidence(finite)["logged intervals with NaN or inf"] == "10 of 10"
    healthy = check(inputs_from_records(records(DATA / "hf_trainer_tqdm"), run="hf"), "loss.finite")
    assert (
        healthy.status.name == "PASS" and healthy.summary == "no NaN or inf in 10 logged intervals"
    )


def test_overflow_messages_count_the_skipped_steps_without_step_lines() -> None:
    """hf_trainer_v4_diverged: no step= line (Accelerate), 37 ``OVERFLOW! Skipping step``
    messages (rank 0) over the Trainer's 40 steps; fp32, so no fp16-to-bf16 fix."""
    recs = records(DATA / "hf_trainer_v4_diverged")
    skipped = check(inputs_from_records(recs, run="hf"), "loss_scale.skipped")
    assert skipped.status.name == "FAIL"
    assert skipped.summary.startswith("37 of 40 steps skipped (92.5%)")
    assert evidence(skipped)["skipped steps"] == "37 (OVERFLOW messages)"
    assert skipped.fix is None


def test_the_silent_rank_comes_first_when_the_launcher_reports_a_victims_code() -> None:
    """tests/data/events_sigkill_victim_code: rank 1 SIGKILLed, rank 0 failed on the closed
    connection (line 94) before the launcher looked, so it printed rank 0's ``return code = 1``
    (line 97). Rank 1 printed nothing: it is the one that went away, though no code names it."""
    recs = records(DATA / "events_sigkill_victim_code")
    errors = check(inputs_from_records(recs, run="v"), "run.errors")
    assert errors.status.name == "FAIL"
    assert errors.summary.startswith(
        "rank 1 stopped first: no error of its own in the record; then rank 0 failed because a "
        "peer was gone (RuntimeError: Read error "
    )
    assert "; exit status 1;" in errors.summary  # the launcher's, not said to be rank 1's
    first = evidence(errors)["rank 1 stopped first"]
    assert first.startswith("no error of its own in the record (rank 0: connection to a peer")
    assert "the only one of 2 ranks that printed no error" in first
    assert "SIGKILL" not in errors.summary  # no code says how rank 1 went: none is guessed
    assert "printed no error while the others lost their connection" in (errors.fix or "")
    state = check(inputs_from_records(recs, run="v"), "run.state")
    assert state.summary.startswith("crashed: rank 1 stopped first")


def test_a_timeout_names_no_silent_rank() -> None:
    """tests/data/events_failures: every error is a collective's timeout. A rank that hangs
    keeps its connections open, so a rank that printed nothing is not said to have gone."""
    errors = check(inputs_from_records(records(DATA / "events_failures"), run="f"), "run.errors")
    assert "stopped first" not in errors.summary and "failed waiting for a peer" in errors.summary


def test_a_worker_torchrun_saw_killed_is_a_crash() -> None:
    """tests/data/events_torchrun_sigkill: rank 1 SIGKILLed, rank 0 SIGTERMed by torchrun, no
    traceback. dsmon said "ended: exit status 1 with no worker error seen"; torchrun's agent
    said which worker failed and how (line 62), its failure report's root cause which global
    rank it was (line 92)."""
    recs = records(DATA / "events_torchrun_sigkill")
    inputs = inputs_from_records(recs, run="t")
    state = check(inputs, "run.state")
    assert state.status.name == "FAIL"
    assert state.summary == "crashed: rank 1 died: killed by signal 9 (SIGKILL), no traceback"
    assert evidence(state)["rank 1 (first)"] == (
        "signal 9 (SIGKILL) (torchrun's root cause: exitcode -9 of rank 1 (local_rank 1) on "
        "localhost)"
    )
    errors = check(inputs, "run.errors")
    assert evidence(errors)["worker exit code"] == "-9 (SIGKILL) (launcher)"
    assert "1 failed worker(s)" in errors.summary  # the report repeats the agent's worker
    assert "out-of-memory killer" in (errors.fix or "")
    # the same log cut before torchrun's report: its agent's line names the local rank only
    cut = [r for r in recs if not (isinstance(r, EventRecord) and r.detail.get("root_cause"))]
    state = check(inputs_from_records(cut, run="t"), "run.state")
    assert state.summary == "crashed: local rank 1 died: killed by signal 9 (SIGKILL), no traceback"
    assert evidence(state)["local rank 1 (first)"] == (
        "signal 9 (SIGKILL) (torchrun: exitcode -9 of local_rank 1)"
    )


def test_torchrun_stopped_by_a_signal_is_no_crash() -> None:
    """tests/data/events_torchrun_sigterm: torchrun got SIGTERM and stopped its workers. Its
    own traceback (``SignalException: Process N got signal: 15``) was taken for a worker's:
    "crashed: a worker died: ...SignalException...". No worker failed."""
    inputs = inputs_from_records(records(DATA / "events_torchrun_sigterm"), run="s")
    state = check(inputs, "run.state")
    assert state.status.name == "WARN"
    assert state.summary == (
        "ended: stopped from outside by SIGTERM (the scheduler's cancel or time limit, a pod's "
        "termination), no worker failed (torchrun got SIGTERM and stopped 2 worker(s))"
    )
    assert evidence(state)["signal"] == "SIGTERM (train.log:117)"  # its agent's own line
    errors = check(inputs, "run.errors")
    assert errors.status.name == "WARN"
    assert errors.summary.startswith(
        "torchrun got SIGTERM and stopped its 2 worker(s): the job was stopped from outside"
    )
    assert "crash" not in state.summary + errors.summary


def test_ctrl_c_is_a_stop_under_every_launcher() -> None:
    """Real jobs stopped by Ctrl-C (SIGINT to the job's whole process group) under DeepSpeed's
    launcher, torchrun and a plain ``python`` launch: every worker prints a
    ``KeyboardInterrupt`` traceback. Each read "crashed: rank 0 died first: KeyboardInterrupt"."""
    for folder, said, who in (
        ("events_sigint_deepspeed", "train.log:115", "DeepSpeed's launcher got SIGINT and "
         "stopped 2 worker(s)"),
        ("events_torchrun_sigint", "train.log:61", "torchrun got SIGINT and stopped 2 worker(s)"),
        ("events_sigint_python", "KeyboardInterrupt (train.log:58)", "rank 0 got SIGINT"),
    ):  # fmt: skip
        inputs = inputs_from_records(records(DATA / folder), run="c")
        state = check(inputs, "run.state")
        assert (state.status.name, state.summary) == (
            "WARN", f"ended: stopped from outside by SIGINT (Ctrl-C), no worker failed ({who})"
        ), folder  # fmt: skip
        assert evidence(state)["signal"] == f"SIGINT ({said})", folder
        errors = check(inputs, "run.errors")
        assert errors.status.name == "WARN", folder
        assert "no worker failed" in errors.summary, folder


def test_a_torchrun_job_that_succeeded_is_not_called_killed() -> None:
    """tests/data/events_torchrun_ok: a 20-step torchrun job that exited 0. torchrun prints no
    line when its workers succeed: the record cannot tell, and says so rather than "killed"."""
    state = check(inputs_from_records(records(DATA / "events_torchrun_ok"), run="t"), "run.state")
    assert state.status.name == "UNKNOWN"
    assert state.summary.startswith("ended: the record ends with no exit status")
    assert "cannot tell a finished run from a stopped one; last step 20" in state.summary
    assert "killed" not in state.summary
    assert "dsmon run" in (state.fix or "")


def test_a_kill_no_line_places_names_no_rank() -> None:
    """tests/data/events_sigkill_unnamed: rank 1 SIGKILLed, the launcher found it before rank 0
    failed and killed rank 0 silently. Its ``return code = -9`` comes with its last worker's
    command line whichever failed, and no rank printed an error: no rank is named."""
    state = check(
        inputs_from_records(records(DATA / "events_sigkill_unnamed"), run="u"), "run.state"
    )
    assert state.status.name == "FAIL"
    assert state.summary == "crashed: a worker died: killed by signal 9 (SIGKILL), no traceback"


def test_a_restarted_torchrun_job_keeps_its_first_death() -> None:
    """tests/data/events_torchrun_restart: local rank 1 SIGKILLed (line 106), torchrun restarted
    the workers, the restart failed to connect (rank 0, exit code 1), and the failure report's
    root cause (line 186) names that second attempt's rank 0. It was read as the first death's
    witness: "exitcode -9 of rank 0", a code and a rank of two different workers."""
    state = check(
        inputs_from_records(records(DATA / "events_torchrun_restart"), run="r"), "run.state"
    )
    assert state.summary.startswith(
        "crashed: local rank 1 died first: killed by signal 9 (SIGKILL), no traceback; then "
        "rank 0 failed because a peer was gone"
    )
    assert evidence(state)["end"] == "torchrun: exitcode -9 of local_rank 1"


def test_torchruns_report_alone_names_the_failed_rank() -> None:
    """The end of events_torchrun_sigkill from torchrun's traceback on (line 63), as people
    paste it into an issue: no agent line, only the failure report. Its root cause alone
    says that rank 1 was killed by SIGKILL."""
    lines = (DATA / "events_torchrun_sigkill" / "train.log").read_text("utf-8").splitlines()
    recs, _ = parse_text("\n".join(lines[62:]) + "\n", run="p", file="train.log")
    state = check(inputs_from_records(recs, run="p"), "run.state")
    assert state.summary == "crashed: rank 1 died: killed by signal 9 (SIGKILL), no traceback"


def test_a_rank_stopped_by_sigterm_points_to_who_sent_it() -> None:
    """tests/data/events_sigterm_rank: rank 1 got SIGTERM, the launcher printed -15 (line 122).
    The fix said "the line before the launcher's names the cause (SIGABRT: a C++ abort;
    SIGSEGV: ...)", which fits a native crash, not a signal another process sent."""
    state = check(inputs_from_records(records(DATA / "events_sigterm_rank"), run="t"), "run.state")
    assert state.summary.startswith(
        "crashed: rank 1 died first: killed by signal 15 (SIGTERM), no traceback; then rank 0 "
        "failed because a peer was gone"
    )
    assert (state.fix or "").startswith("SIGTERM with no traceback: another process asked rank 1")
    assert "SIGABRT" not in (state.fix or "")
