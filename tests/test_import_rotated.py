"""A rotated log imported as the one output it is (tests/data/rotated_copytruncate).

A real job at DeepSpeed's default log level, rotated by copytruncate mid-run: ``train.log.1``
holds steps 1-79, ``train.log`` (after a hole of NUL bytes) steps 80-100, whose lines name
no step. ``dsmon import`` skipped ``train.log.1`` (not a log's name) and read ``train.log``
alone, without a step number.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA

from dsmon.cli import main
from dsmon.load.files import Found, discover, import_paths
from dsmon.load.rotated import in_read_order, rotation
from dsmon.model.records import TimerRecord
from dsmon.store.base import Store

FOLDER = DATA / "rotated_copytruncate"


def test_both_files_are_read_oldest_first_and_every_step_is_numbered(store: Store) -> None:
    (res,) = import_paths(store, [FOLDER])
    assert [f.label for f in res.files] == ["ds_config.json", "train.log.1", "train.log"]
    timers = [r for r in store.scan(res.run, "timer") if isinstance(r, TimerRecord)]
    steps = [(r.src.file, r.step) for r in timers if r.group == "global"]
    assert [s for _, s in steps] == list(range(1, 101))
    assert {f for f, s in steps if s is not None and s <= 79} == {"train.log.1"}
    assert {f for f, s in steps if s is not None and s >= 80} == {"train.log"}
    # steps 80-100 take the time of the copy's last stamped line, as in one file
    assert all(r.ts is not None for r in timers)


def test_rotated_names_and_their_age() -> None:
    assert rotation("train.log.2") == ("train.log", (0, -2, ""))
    assert rotation("train.log-20261201") == ("train.log", (1, 0, "20261201"))
    assert rotation("train-20261201.log") == ("train.log", (1, 0, "20261201"))
    assert rotation("train.log") is None
    assert rotation("ds_config.json.1") is None
    assert rotation("train.log.1.gz") is None  # compressed: not read
    assert rotation("slurm-12345678.out") is None  # a Slurm job id, not a date
    assert rotation("train.log-2026120113") == ("train.log", (1, 0, "2026120113"))  # hourly


def test_a_family_is_read_oldest_first_in_its_members_places(tmp_path: Path) -> None:
    names = ["a.out", "train.log", "train.log.1", "train.log.10", "train.log.2", "z.log"]
    found = [Found(tmp_path / n, "log", n) for n in names]
    ordered = in_read_order(found, "log")
    assert [f.label for f in ordered] == [
        "a.out", "train.log.10", "train.log.2", "train.log.1", "train.log", "z.log",
    ]  # fmt: skip
    assert {f.family for f in ordered} == {None, (tmp_path / "train.log").as_posix()}


@pytest.mark.parametrize("hole_mib", [0, 2])
def test_a_log_behind_a_hole_is_found_in_a_folder(tmp_path: Path, hole_mib: int) -> None:
    """A folder's file is a log when its first 64 KiB look like one: after the hole."""
    log = tmp_path / "train.log"
    with log.open("wb") as f:
        f.seek(hole_mib << 20)
        f.write((FOLDER / "train.log").read_bytes().lstrip(b"\0"))
    assert [f.kind for f in discover(tmp_path)] == ["log"]


def test_parse_of_the_files_as_a_shell_glob_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    """``dsmon parse train.log*``: the shell lists train.log first; read oldest first."""
    files = [str(FOLDER / "train.log"), str(FOLDER / "train.log.1")]
    assert main(["parse", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = [json.loads(line)["step"] for line in out if '"group":"global"' in line]
    assert steps == list(range(1, 101))
