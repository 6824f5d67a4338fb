"""csv_monitor's series followed as they grow, as ``dsmon run`` and ``dsmon watch`` do.

The series is the real one of tests/data/probe_monitored (DeepSpeed 0.19.8's csv_monitor:
``monitor/tiny/Train_Samples_lr.csv``), written here a few rows at a time.
"""

from __future__ import annotations

from pathlib import Path

from locations import DATA

from collectors.tail.state import StateFile
from collectors.tail.tailer import Tailer
from dsmon.model.records import MonitorPointRecord
from dsmon.parse.side_files import CsvMonitorParser, parse_csv_monitor

SERIES = DATA / "probe_monitored" / "monitor" / "tiny" / "Train_Samples_lr.csv"


def points(recs: list[object]) -> list[tuple[str, int, float | None]]:
    return [(r.tag, r.samples, r.value) for r in recs if isinstance(r, MonitorPointRecord)]


def test_the_series_followed_row_by_row_equals_the_file_read_whole(tmp_path: Path) -> None:
    folder = tmp_path / "monitor" / "tiny"
    folder.mkdir(parents=True)
    target = folder / SERIES.name
    rows = SERIES.read_text().splitlines(keepends=True)
    state = StateFile(tmp_path / "tail.json")
    tailer = Tailer([], run="r", node="n", state=state, monitor_files=[str(folder / "*.csv")])
    seen = []
    for start in range(0, len(rows), 7):
        with target.open("a") as f:
            f.writelines(rows[start : start + 7])
        seen += tailer.poll(final=True).records
    whole, _ = parse_csv_monitor(SERIES.read_text(), "r", str(target))
    assert points(seen) == points(whole) and len(whole) == 30
    assert {p[0] for p in points(seen)} == {"Train/Samples/lr"}
    tailer.close()


def test_a_parser_started_past_the_header_names_the_series_from_the_file() -> None:
    parser = CsvMonitorParser("r", str(SERIES))
    rows = SERIES.read_text().splitlines()[5:]  # a collector restarted mid-file
    recs = [r for row in rows for r in parser.feed(row + "\n")]
    assert {r.tag for r in recs if isinstance(r, MonitorPointRecord)} == {"Train/Samples/lr"}
    other = CsvMonitorParser("r", "custom.csv")
    assert other.feed("8,1.0\n") == [] and other.diag.unparsed["csv_monitor"] == 1
