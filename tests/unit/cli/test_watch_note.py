"""``dsmon watch`` says once when the run's log has nothing per step, and what to do.

On real output: the log of tests/data/probe_slow_data at DeepSpeed's default log level (no
step line), alone and with the probe's files beside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from locations import DATA

from cli.watch import StepOutputNote
from dsmon.load.files import import_paths
from dsmon.store.store import open_store


def stored(tmp_path: Path, *paths: Path) -> str:
    url = str(tmp_path / "store.sqlite")
    with open_store(url) as store:
        import_paths(store, list(paths), run="r")
    return url


def test_a_log_without_steps_is_told_the_two_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = StepOutputNote(stored(tmp_path, DATA / "probe_slow_data" / "train.log"), "r")
    assert note.check(now=0.0) is False and capsys.readouterr().out == ""  # not yet: give it time
    note.check(now=30.0)  # between looks: nothing asked
    note.check(now=note.GRACE_S + 1)
    out = capsys.readouterr().out
    assert out.startswith("dsmon watch: run 'r': This run's output has nothing per step")
    assert "dsmon run -- deepspeed train.py ..." in out and '"wall_clock_breakdown": true' in out
    note.check(now=1000.0)
    assert capsys.readouterr().out == ""  # said once


def test_a_run_with_steps_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    note = StepOutputNote(stored(tmp_path, DATA / "probe_slow_data"), "r")
    for now in (0.0, 100.0, 200.0):
        note.check(now=now)
    assert capsys.readouterr().out == "" and note.said


def test_a_probed_run_before_its_first_step_is_not_told() -> None:
    from dsmon.analysis.step_output import lacks_step_output

    assert lacks_step_output({"event": 12, "config": 1})
    assert not lacks_step_output({"event": 12, "heartbeat": 40})  # dsmon run: steps will come
    assert not lacks_step_output({"event": 12, "rank_step": 3})
    assert not lacks_step_output({})  # nothing started yet
