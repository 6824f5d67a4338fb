"""A rotated log imported as the one output it is (tests/data/rotated_copytruncate).

A real job at DeepSpeed's default log level, rotated by copytruncate mid-run: ``train.log.1``
holds steps 1-79, ``train.log`` (after a hole of NUL bytes) steps 80-100, whose lines name
no step. ``dsmon import`` skipped ``train.log.1`` (not a log's name) and read ``train.log``
alone, without a step number.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from shared_fixtures import DATA

from cli.main import main
from dsmon.load.files import import_paths, read_found
from dsmon.load.kinds import Found, discover, in_read_order
from dsmon.load.rotated import rotation
from dsmon.model.records import TimerRecord
from dsmon.parse.base import Diagnostics
from dsmon.store.store import Store

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
    assert rotation("train.log.1.gz") == ("train.log", (0, -1, ""))  # logrotate's compress
    assert rotation("train.log.gz") is None
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


def global_steps(found: list[Found], diag: Diagnostics) -> list[int | None]:
    carries: dict[str, dict[str, object]] = {}
    recs = [r for f in found for r in read_found(f, "r", diag, carries=carries)]
    return [r.step for r in recs if isinstance(r, TimerRecord) and r.group == "global"]


def test_a_compressed_rotation_is_read_as_the_file_it_was(tmp_path: Path) -> None:
    """logrotate's ``compress``: ``train.log.1.gz`` holds steps 1-79, read decompressed and
    first, so ``train.log``'s steps (no step in their lines) are numbered on from it."""
    shutil.copy(FOLDER / "train.log", tmp_path / "train.log")
    with gzip.open(tmp_path / "train.log.1.gz", "wb") as out:
        out.write((FOLDER / "train.log.1").read_bytes())
    found = discover(tmp_path)
    assert [(f.label, f.kind) for f in found] == [("train.log.1.gz", "log"), ("train.log", "log")]
    diag = Diagnostics()
    assert global_steps(found, diag) == list(range(1, 101))
    plain = Diagnostics()
    global_steps(discover(FOLDER / "train.log.1"), plain)
    assert diag.lines == plain.lines + len((FOLDER / "train.log").read_bytes().splitlines())


def test_a_cut_compressed_rotation_keeps_its_lines_before_the_cut(tmp_path: Path) -> None:
    """A .gz cut short (logrotate still compressing, a partial copy): counted, never a crash."""
    data = gzip.compress((FOLDER / "train.log.1").read_bytes())
    (tmp_path / "train.log.1.gz").write_bytes(data[: len(data) // 2])
    diag = Diagnostics()
    steps = global_steps(discover(tmp_path / "train.log.1.gz"), diag)
    assert 10 < len(steps) < 79 and steps == list(range(1, len(steps) + 1))
    assert diag.cut["compressed file"] == 1
    assert "EOFError" in diag.examples["compressed file"][0]
