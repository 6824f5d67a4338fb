"""A rank that dies on an uncaught exception: the probe says so (tests/data/probe_crash_torchrun).

A real torchrun job under ``dsmon run`` whose rank 1 raises at step 8 (see its README.md). Its
ranks still run their ``atexit`` handlers, so the probe's last heartbeat used to read
``exited`` and the checklist said both ranks "exited normally".
"""

from __future__ import annotations

import shutil
from pathlib import Path

from health_support import check, evidence
from shared_fixtures import DATA

from dsmon.analysis.summary import summary_text
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Status
from dsmon.health.run_state import stored_state
from dsmon.load.files import import_paths, read_found
from dsmon.load.kinds import discover
from dsmon.model.records import HeartbeatRecord, Record
from dsmon.parse.base import Diagnostics
from dsmon.store.store import open_store

RUN = DATA / "probe_crash_torchrun"
CRASH = "RuntimeError: [train.py] deliberate crash at step 8 (rank 1)"


def records(path: Path) -> list[Record]:
    return [r for f in discover(path) for r in read_found(f, "crash", Diagnostics())]


def test_the_last_heartbeat_names_the_exception() -> None:
    beats = [r for r in records(RUN / "probe") if isinstance(r, HeartbeatRecord)]
    last = {b.src.rank: b for b in beats}  # files are read in order: the last one wins
    assert (last[1].phase, last[1].error) == ("failed", CRASH)
    assert last[0].phase == "failed" and "Connection closed by peer" in (last[0].error or "")


def test_ended_ranks_are_not_called_normal_and_the_first_to_die_is_named() -> None:
    inputs = inputs_from_records(records(RUN), run="crash")
    for rule in ("run.stalled", "ranks.hang"):
        found = check(inputs, rule)
        assert found.status is Status.PASS, found.summary  # no stall, no hang: it ended
        assert "exited normally" not in found.summary
        assert "2 on an uncaught exception, first rank 1 (RuntimeError: [train.py]" in found.summary
    errors = check(inputs, "run.errors")  # the log's tracebacks say more than the probe
    assert errors.status is Status.FAIL
    # the first to die (the probe's time) is named apart from rank 0, which failed because of it;
    # torchrun's own ChildFailedError report is no worker's death
    assert errors.summary.startswith(
        f"rank 1 died first: {CRASH} (after step 7); then rank 0 failed because a peer was gone"
    )
    # torchrun's agent line 87: "failed (exitcode: 1) local_rank: 1": one failed worker
    assert errors.summary.endswith("exit status 1; 3 error event(s), 1 failed worker(s)")
    assert evidence(errors)["worker exit code"] == "1 (launcher)"


def test_without_the_log_the_probe_alone_fails_the_run(tmp_path: Path) -> None:
    """The worker's traceback went to an output dsmon does not follow: only the probe saw it."""
    shutil.copytree(RUN / "probe", tmp_path / "probe")
    inputs = inputs_from_records(records(tmp_path), run="crash")
    errors = check(inputs, "run.errors")
    assert errors.status is Status.FAIL
    assert errors.summary.startswith(f"rank 1 died first, on an uncaught exception ({CRASH})")
    assert evidence(errors)["rank 1"].startswith(f"failed after step 7 on {CRASH}")
    with open_store(tmp_path / "s.sqlite") as store:
        import_paths(store, [tmp_path], run="crash")
        text = summary_text(store, "crash", stored_state(store, "crash").line())
        outcome = [x for x in text.splitlines() if "Outcome" in x]
    # dsmon import says what dsmon check says: rank 1 first, rank 0 its victim
    assert outcome == [
        f"Outcome     crashed: rank 1 died first: {CRASH} (after step 7); then rank 0 failed "
        "because a peer was gone (RuntimeError: Connection closed by peer [127.0.0.1]:4012. This "
        "is typically caused by a remote worker crashing. Check...)"
    ]
