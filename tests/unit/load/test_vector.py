"""The vector path of a saved log stores what the per-line path stores, on every corpus file.

``dsmon import`` and ``dsmon parse`` find a log's plain timer and progress lines in compiled
code (``dsmon.load.vector``) and read every other line with the log parser; the live tail
reads every line with the log parser. The two must give the same rows (key, columns and JSON
body, in the same order) and the same diagnostics, whatever a file holds.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import lanes
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lanes import examples, sample
from locations import DATA, ROOT

from dsmon.load import vector
from dsmon.load.files import LOG, read_found, read_found_rows, read_log
from dsmon.load.kinds import Found, classify, discover
from dsmon.load.plain_rows import ProgressRows
from dsmon.load.rotated import Carries
from dsmon.parse.base import Diagnostics
from dsmon.parse.log import LogParser
from dsmon.store.records.rows import RecordRow, as_row

# Checked without importing it: every worker collects this module, and importing polars costs
# each a third of a second that the tests running elsewhere do not need.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("polars") is None, reason="polars is not installed"
)

SHARED = ROOT.parent / "shared" / "corpus"
DEMO = ROOT / "dsmon" / "data" / "demo" / "train.log"


def corpus_files() -> list[Path]:
    """Every file of tests/data and of the shared corpus that dsmon would read as a log.

    tests/data's first, then the corpus's, each in path order: the fast lane's sample (every
    fourth) is then the same wherever the checkout and the corpus beside it live.
    """
    files = [p for root in (DATA, SHARED) if root.is_dir() for p in sorted(root.rglob("*"))]
    return [p for p in files if p.is_file() and _as_log(p) is not None]


def _as_log(path: Path) -> Found | None:
    found = classify(path, path.name, explicit=True)
    return found if found is not None and found.kind == LOG else None


def both_ways(found: Found) -> tuple[list[RecordRow], Diagnostics, list[RecordRow], Diagnostics]:
    """Rows and diagnostics per line, then by the vector path."""
    line_diag, vec_diag = Diagnostics(), Diagnostics()
    per_line = [as_row(r) for r in read_found(found, "r", line_diag)]
    read = list(read_found_rows(found, "r", vec_diag))
    vectored = [as_row(r) for r in read]
    TAKEN.append(sum(1 for r in read if isinstance(r, RecordRow)))
    return per_line, line_diag, vectored, vec_diag


#: Rows the vector path made itself, per file read both ways.
TAKEN: list[int] = []


def test_every_corpus_file_gives_the_same_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    every = corpus_files()
    assert len(every) > 100  # tests/data alone holds more logs than this
    files = sample(every)
    progress = _count_progress(monkeypatch)
    for path in files:
        found = _as_log(path)
        assert found is not None
        per_line, line_diag, vectored, vec_diag = both_ways(found)
        assert vectored == per_line, path
        assert vec_diag == line_diag, path
    # the vector path itself took the timer lines (3,500 of them in all, 500 in the fast lane)
    assert sum(TAKEN[-len(files) :]) > 200
    # and step and throughput lines, of every momentum form: tests/data's give 180 (28 in the
    # fast lane), with the corpus beside the checkout 376 (48)
    assert len(progress) > (20 if lanes.FAST else 150)
    assert {m.split("=")[0] for m in progress} == {"step", "epoch"}
    assert lanes.FAST or any("mom=[[" in m for m in progress)  # DeepSpeed before 0.7's lists


def _count_progress(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages of the progress lines the vector path makes rows of from now on."""
    taken: list[str] = []
    row = ProgressRows.row

    def counting(
        self: ProgressRows, line: int, offset: int, ts: str | None, rank: int | None, message: str
    ) -> RecordRow | None:
        made = row(self, line, offset, ts, rank, message)
        if made is not None:
            taken.append(message)
        return made

    monkeypatch.setattr(ProgressRows, "row", counting)
    return taken


def test_every_run_folder_gives_the_same_rows() -> None:
    """Folders as ``dsmon import`` reads them: rank logs, rotated logs with their step clock
    carried from file to file, side files."""
    folders = [p for root in (DATA, SHARED) if root.is_dir() for p in sorted(root.glob("*/"))]
    for folder in sample(folders):
        line_carries: Carries = {}
        vec_carries: Carries = {}
        for found in discover(folder):
            line_diag, vec_diag = Diagnostics(), Diagnostics()
            per_line = [as_row(r) for r in read_found(found, "r", line_diag, carries=line_carries)]
            vectored = [
                as_row(r) for r in read_found_rows(found, "r", vec_diag, carries=vec_carries)
            ]
            assert vectored == per_line, found.path
            assert vec_diag == line_diag, found.path
        assert vec_carries == line_carries, folder


def _log(tmp_path: Path, text: str, name: str = "train.log") -> Found:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    found = _as_log(path)
    assert found is not None
    return found


H = "[2026-11-29 14:11:06,413] [INFO] [logging.py:123:log_dist] "
MICRO = "time (ms) | fwd_microstep: 12.30 | bwd_microstep: 30.00 | bwd_inner_microstep: 0.00 | bwd_allreduce_microstep: 8.33 | step_microstep: 11.74"  # fmt: skip
GLOBAL = "time (ms) | fwd: 12.30 | bwd: 30.00 | bwd_inner: 22.41 | bwd_allreduce: 8.34 | step: 11.74"  # fmt: skip
ZERO = "time (ms) | optimizer_allgather: 11.76 | optimizer_gradients: 51.28 | optimizer_step: 77.51"  # fmt: skip
STEP = "step=5, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"
RESUMED_STEP = "step=136005, skipped=0, lr=[2.012568679065123e-05, 2.012568679065123e-05], mom=[(0.9, 0.95), (0.9, 0.95)]"  # fmt: skip
RESUMED_TPUT = "[2025-11-10 09:43:39,573] [INFO] [timer.py:264:stop] epoch=0/micro_step=5/global_step=5, RunningAvgSamplesPerSec=2443.9516881034883, CurrSamplesPerSec=2553.443452275532, MemAllocated=3.71GB, MaxMemAllocated=39.0GB"  # fmt: skip


@pytest.mark.parametrize(
    "lines",
    [
        # timer lines before anything names a step: held, then numbered
        [f"[Rank 0] {ZERO}", f"[Rank 0] {MICRO}", f"[Rank 0] {GLOBAL}"] * 3
        + [H + f"[Rank 0] {STEP}"]
        + [f"[Rank 0] {MICRO}", f"[Rank 0] {GLOBAL}"] * 12,
        # the launcher starts the run, logger headers on every line, a relaunch in the middle
        ["[2026-11-29 14:10:59,554] [INFO] [runner.py:618:main] cmd = python train.py"]
        + [H + f"[Rank 0] {ZERO}", H + f"[Rank 1] {MICRO}", H + GLOBAL] * 5
        + ["[2026-11-29 14:12:59,554] [INFO] [launch.py:618:main] WORLD INFO DICT: {}"]
        + [H + f"[Rank 0] {MICRO}", H + f"[Rank 0] {GLOBAL}"] * 5,
        # a line cut by terminal wrapping, a timestamp no clock shows, a launcher's timer line
        [
            H + STEP,
            f"[Rank 0] {GLOBAL}",
            "[Rank 0] time (ms) | fwd_microstep: 1.00 | bwd_micro",
            "step: 2.00 | bwd_inner_microstep: 1.00 | bwd_allreduce_microstep: 1.00 | step_microstep: 1.00",
            f"[2026-19-39 25:61:00,000] [INFO] [logging.py:1:f] [Rank 0] {GLOBAL}",
            f"[2026-11-29 14:11:06,413] [INFO] [launch.py:1:f] [Rank 0] {GLOBAL}",
            f"[Rank 0] {GLOBAL}",
            "   ",
            f"  [Rank 0] {GLOBAL}",
            f"[Rank 0] {GLOBAL}\r",
            # what the cleaner acts on: tqdm's \r, colours, a glued line, other scripts' digits
            "[Rank 0] time (ms) | fwd: 1.00 \r| bwd: 2.00",
            f"\x1b[32m[Rank 0] {GLOBAL}\x1b[0m",
            f"[2026-11-29 14:11:06,413] [INFO] [a.py:1:f [Rank 0] {GLOBAL}",
            f"[Rank \u0661] {GLOBAL}",
            "[Rank 0] time (ms) | fwd: \u0661\u0662.30 | bwd: 1.00",
            f"[Rank 0] {GLOBAL} | fwd: 1.00",
        ],
        # the pipeline engine: its global line comes every steps_per_print steps
        [
            H + STEP,
            "[Rank 0] time (ms) | batch_input: 1.00 | train_batch: 30.00",
            f"[Rank 0] {GLOBAL}",
        ]
        + [
            f"[Rank 0] {GLOBAL}",
            "[Rank 0] time (ms) | fwd: 1.00",
            "[Rank 0] time (ms) | fwd: 1.00 | fwd: 2.00",
        ],
        # progress lines: a resumed run's (its ThroughputTimer counts again from 0; the
        # field corpus's Aurora run), then figures a record does not hold as printed
        [H + STEP, f"[Rank 0] {GLOBAL}"]
        + [
            line
            for progress in [
                [f"{H}[Rank 0] {RESUMED_STEP}", RESUMED_TPUT],
                [RESUMED_TPUT],
                [f"{H}[Rank 0] step=9999999999999999, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"],
                [
                    f"{H}[Rank 0] step=7, skipped=12345678901234567890, lr=[0.0001], mom=[[0.9, 0.999]]"
                ],
                [f"{H}[Rank 0] step=8, skipped=0, lr=[inf, 0.1], mom=[(0.9, 0.999)]"],
                [f"{H}[Rank 0] step=9, skipped=0, lr=[0.1], mom=[(1e999, 0.999)]"],
                [f"{H}[Rank 0] step=9, skipped=0, lr=[0.1], mom=[(0.9, 0.999]]"],
                [RESUMED_TPUT.replace("MemAllocated=3.71GB", "MemAllocated=12345678901.5GB")],
                [
                    RESUMED_TPUT.replace(
                        "CurrSamplesPerSec=2553.443452275532", "CurrSamplesPerSec=1e400"
                    )
                ],
                [RESUMED_TPUT.replace("global_step=5", "global_step=99999999999999999")],
            ]
            for line in [*progress, f"[Rank 0] {MICRO}", f"[Rank 0] {GLOBAL}"]
        ],
    ],  # fmt: skip
    ids=["held", "headers-relaunch", "cut-and-odd", "pipeline", "progress"],
)
def test_hand_made_logs_give_the_same_rows(tmp_path: Path, lines: list[str]) -> None:
    per_line, line_diag, vectored, vec_diag = both_ways(_log(tmp_path, "\n".join(lines) + "\n"))
    assert vectored == per_line
    assert vec_diag == line_diag


def test_a_rank_file_gives_its_rank_to_plain_timer_lines(tmp_path: Path) -> None:
    text = "\n".join([H + STEP] + [MICRO, GLOBAL] * 4) + "\n"
    found = _log(tmp_path, text, "20261129_rank3.log")
    assert found.rank == 3
    per_line, _, vectored, _ = both_ways(found)
    assert vectored == per_line
    assert {r.rank for r in vectored if r.kind == "timer"} == {3}


def test_plain_timer_lines_skip_the_line_parser() -> None:
    """On the demo run most timer lines never reach ``LogParser.feed``: the path is used."""
    fed = 0

    class Counting(LogParser):
        def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list:  # type: ignore[type-arg]
            nonlocal fed
            fed += "time (ms) |" in raw
            return super().feed(raw, offset, line)

    data = DEMO.read_bytes()
    rows = list(vector.log_rows(io.BytesIO(data), Counting("demo", "train.log")))
    timers = sum(1 for r in rows if isinstance(r, RecordRow) and r.kind == "timer")
    assert timers > 80
    assert fed < 5


def test_plain_progress_lines_skip_the_line_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the demo run the step and throughput lines never reach ``LogParser.feed`` once the
    steps are known: their rows are made in the vector path, the rows the per-line path makes."""
    fed: list[str] = []

    class Counting(LogParser):
        def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list:  # type: ignore[type-arg]
            if "step=" in raw:
                fed.append(raw)
            return super().feed(raw, offset, line)

    taken = _count_progress(monkeypatch)
    data = DEMO.read_bytes()
    read = list(vector.log_rows(io.BytesIO(data), Counting("demo", "train.log")))
    steps = [r for r in read if isinstance(r, RecordRow) and r.kind in {"step", "throughput"}]
    assert len(steps) == len(taken) == 12
    assert len(fed) == 1  # ``step=0`` at the engine's start, before any step is known
    per_line = list(read_log(io.BytesIO(data), LogParser("demo", "train.log")))
    assert [as_row(r) for r in read] == [as_row(r) for r in per_line]


def test_progress_counts_every_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The import's progress bar is fed as the per-line path feeds it: all bytes, once."""
    monkeypatch.setattr(vector, "CHUNK_LINES", 512)
    monkeypatch.setattr(vector, "PROGRESS_EVERY", 64 << 10)
    log = tmp_path / "train.log"
    log.write_bytes(DEMO.read_bytes() * 10)  # several chunks of lines
    found = _as_log(log)
    assert found is not None
    told: list[int] = []
    n = sum(1 for _ in read_found_rows(found, "r", Diagnostics(), told.append))
    assert n > 1000
    assert sum(told) == log.stat().st_size
    assert len(told) >= 3  # as chunks are read, not once at the end


_PIECES = st.sampled_from(
    [H, "", "[Rank 0] ", "[Rank 12] ", "[Rank -1] ", "rank=0 ", " ", "\r", "\x1b[0m", "0: "]
)
_NAMES = st.sampled_from(
    ["fwd", "bwd", "step", "fwd_microstep", "bwd_microstep", "forward", "batch_input",
     "optimizer_step", "optimizer_allgather", "bwd_inner_micro      step", "a b", "x/y-z"]
)  # fmt: skip
_VALUES = st.sampled_from(["0.00", "12.30", "7.05", "100.00", "-1.00", "inf", "1e3", "12.3"])


@st.composite
def _timer_lines(draw: st.DrawFn) -> str:
    fields = draw(st.lists(st.tuples(_NAMES, _VALUES), min_size=1, max_size=6))
    body = " | ".join(f"{n}: {v}" for n, v in fields)
    return (
        draw(_PIECES)
        + draw(_PIECES)
        + f"time (ms) | {body}"
        + draw(st.sampled_from(["", " ", "\r"]))
    )


#: Progress messages of real runs (tests/data, the demo run): the step line of every momentum
#: form, the v0.8+ ThroughputTimer line, and look-alikes the vector path leaves to the parser.
_PROGRESS = st.sampled_from(
    [
        STEP,
        "step=2000, skipped=1995, lr=[0.001, 0.001], mom=[0.0, 0.0]",
        "step=25, skipped=5, lr=[1.446140557591026e-05], mom=[[0.8, 0.999]]",
        "step=5, skipped=0, lr=[9.999999999999999e-06, 9.999999999999999e-06], mom=[(0.9, 0.999), (0.9, 0.999)]",
        "epoch=0/micro_step=5/global_step=5, RunningAvgSamplesPerSec=141.04703749267884, CurrSamplesPerSec=127.54886405854509, MemAllocated=0.42GB, MaxMemAllocated=0.42GB",
        "epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=-inf, CurrSamplesPerSec=-inf, MemAllocated=0.42GB, MaxMemAllocated=0.43GB",
        "step=0, skipped=0, lr=[inf], mom=[(0.9, 0.999)]",
        "step=١, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
        "step=5, skipped=0, lr=[0.0001], mom=",
    ]
)  # fmt: skip


@st.composite
def _progress_lines(draw: st.DrawFn) -> str:
    return (
        draw(_PIECES)
        + draw(_PIECES)
        + draw(_PROGRESS)
        + draw(st.sampled_from(["", " ", "\r", "`", "\t"]))
    )


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    lines=st.lists(
        st.one_of(
            _timer_lines(),
            _progress_lines(),
            st.sampled_from([H + STEP, f"[Rank 0] {GLOBAL}", f"[Rank 0] {MICRO}", "ti", ""]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_any_mix_of_timer_and_progress_lines_gives_the_same_rows(
    tmp_path: Path, lines: list[str]
) -> None:
    per_line, line_diag, vectored, vec_diag = both_ways(_log(tmp_path, "\n".join(lines) + "\n"))
    assert vectored == per_line
    assert vec_diag == line_diag
