"""``dsmon export`` and ``dsmon import`` of JSON-lines records: a run moves between stores whole.

The runs are real DeepSpeed output from tests/data (the corpus's z2 ZeRO-2 run with its
ds_config.json, the detailed flops profile run, a csv_monitor folder), so every record kind
they hold, nested profile modules and lr tuples included, goes through the round trip.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_support import GPUS, gpu_samples
from server_support import stop_later
from shared_fixtures import DATA, Z2

from cli import main as cli
from dsmon.load.files import import_paths
from dsmon.load.kinds import RECORDS, classify
from dsmon.model.records import Record
from dsmon.serve.run import start_ingest_server
from dsmon.store.store import Store, open_store

RUNS = ("z2", "flops_detailed_stdout", "csv_tensorboard")
TOKEN = "test-token-0123456789abcdef"


def by_kind(store: Store, run: str) -> dict[str, list[Record]]:
    """Every record of a run, per kind, each kind in stored order."""
    (info,) = [r for r in store.runs() if r.name == run]
    return {kind: store.records(run, kind) for kind in info.kinds}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A SQLite store holding the three real runs, imported from their folders."""
    path = tmp_path_factory.mktemp("source") / "a.sqlite"
    with open_store(path) as store:
        import_paths(store, [DATA / run for run in RUNS])
    yield path


def export(store: Path, run: str, out: Path) -> None:
    assert cli.main(["export", run, "--store", str(store), "-o", str(out)]) == 0


def test_round_trip_into_each_backend(source: Path, store: Store, tmp_path: Path) -> None:
    """SQLite -> JSON lines -> a fresh store of each backend (SQLite, PostgreSQL): all equal."""
    for run in RUNS:
        export(source, run, tmp_path / f"{run}.jsonl")
    (res,) = import_paths(store, [tmp_path / f"{run}.jsonl" for run in RUNS])
    assert list(res.runs) == list(RUNS)  # each file keeps the run its records name
    with open_store(source) as before:
        assert [r.name for r in store.runs()] == sorted(RUNS)
        for run in RUNS:
            assert by_kind(store, run) == by_kind(before, run)
        assert res.inserted == res.records == sum(r.n_records for r in before.runs())
    flops = by_kind(store, "flops_detailed_stdout")["flops_profile"]
    assert flops and all(p.modules for p in flops)  # nested module tables came back whole


def test_gpu_samples_round_trip(store: Store, tmp_path: Path) -> None:
    """GPU samples (which no log holds: the collector samples NVML) move whole too."""
    with open_store(tmp_path / "a.sqlite") as a:
        a.add(gpu_samples("gpus", seconds=30))
        export(tmp_path / "a.sqlite", "gpus", tmp_path / "gpus.jsonl")
        (res,) = import_paths(store, [tmp_path / "gpus.jsonl"])
        assert res.inserted == 30 * len(GPUS)
        assert store.records("gpus", "gpu") == a.records("gpus", "gpu")


def test_export_prints_what_parse_prints(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same lines, same bytes: a run's export is the parse output of its log, kind by kind."""
    assert cli.main(["export", "z2", "--store", str(source)]) == 0
    exported = capsys.readouterr().out.splitlines()
    # in the order the folder import read them: ds_config.json, then train.log
    assert cli.main(["parse", str(Z2 / "ds_config.json"), str(Z2 / "train.log")]) == 0
    parsed = capsys.readouterr().out.splitlines()
    kind = lambda line: json.loads(line)["kind"]  # noqa: E731
    assert len(exported) == len(parsed) == 119
    for k in {kind(line) for line in parsed}:
        assert [ln for ln in exported if kind(ln) == k] == [ln for ln in parsed if kind(ln) == k]


def test_import_renames_with_run(source: Path, tmp_path: Path) -> None:
    export(source, "z2", tmp_path / "z2.jsonl")
    with open_store(tmp_path / "b.sqlite") as store:
        (res,) = import_paths(store, [tmp_path / "z2.jsonl"], run="moved")
        assert list(res.runs) == ["moved"]
        assert [r.name for r in store.runs()] == ["moved"]
        moved = by_kind(store, "moved")
        with open_store(source) as before:
            want = by_kind(before, "z2")
    assert {k: [r.src.file for r in v] for k, v in moved.items()} == {
        k: [r.src.file for r in v] for k, v in want.items()
    }
    assert {r.src.run for v in moved.values() for r in v} == {"moved"}
    timers = moved["timer"]
    assert [(t.step, t.values_ms) for t in timers] == [(t.step, t.values_ms) for t in want["timer"]]


def test_records_are_told_by_content_not_name(source: Path, tmp_path: Path) -> None:
    """An export renamed ``.log``, ``.json`` or with no suffix is still read as records."""
    export(source, "z2", tmp_path / "z2.jsonl")
    text = (tmp_path / "z2.jsonl").read_bytes()
    for name in ("copy.log", "copy.json", "copy"):
        (tmp_path / name).write_bytes(text)
        found = classify(tmp_path / name, name)
        assert found is not None and found.kind == RECORDS
    # and a real log is still a log, not records
    found = classify(Z2 / "train.log", "train.log")
    assert found is not None and found.kind == "log"


def test_bad_lines_are_counted_and_named(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export(source, "z2", tmp_path / "z2.jsonl")
    lines = (tmp_path / "z2.jsonl").read_text().splitlines()
    timer_at = next(i for i, ln in enumerate(lines) if '"kind":"timer"' in ln)
    bad = json.loads(lines[timer_at])
    bad["step"] = "seven"
    lines[timer_at] = json.dumps(bad)
    lines[2] = lines[2][:40]  # cut short
    (tmp_path / "broken.jsonl").write_text("\n".join(lines) + "\n")
    store = str(tmp_path / "b.sqlite")
    capsys.readouterr()
    assert cli.main(["import", str(tmp_path / "broken.jsonl"), "--store", store]) == 0
    out, err = capsys.readouterr()
    assert f"Imported    {len(lines) - 2} records ({len(lines) - 2} new) from 1 file(s)" in out
    assert "2 bad record lines skipped" in out
    assert err.splitlines() == [
        "dsmon import: skipped broken.jsonl:3: not JSON: Unterminated string starting at: "
        "line 1 column 36 (char 35)",
        f"dsmon import: skipped broken.jsonl:{timer_at + 1}: field 'step': expected int, got str",
    ]


def test_a_v1_records_answer_imports(source: Path, tmp_path: Path) -> None:
    """The body of ``GET /v1/records`` (records with their store ids) is read back as is."""
    handle = start_ingest_server(str(source), TOKEN, "127.0.0.1", 0)
    try:
        request = urllib.request.Request(
            f"{handle.url}/v1/records?run=z2&kind=timer&limit=50",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            body = resp.read()
    finally:
        stop_later(handle)
    (tmp_path / "page.json").write_bytes(body)
    answer = json.loads(body)
    # one record per line too, as a script that splits the answer writes them
    lines = "\n".join(json.dumps(r) for r in answer["records"][:10])
    (tmp_path / "items.jsonl").write_text(lines + "\n")
    with open_store(source) as before:
        want = before.records("z2", "timer", limit=50)
    with open_store(tmp_path / "b.sqlite") as store:
        (res,) = import_paths(store, [tmp_path / "page.json"])
        assert (res.records, res.inserted) == (50, 50)
        assert store.records("z2") == want
        (again,) = import_paths(store, [tmp_path / "items.jsonl"])
        assert (again.records, again.inserted) == (10, 0)


def test_unknown_run_exits_2_naming_the_runs(
    source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "z9", "--store", str(source)]) == 2
    assert capsys.readouterr().err == (
        f"dsmon: export: no run 'z9' in {source}; "
        "runs there: csv_tensorboard, flops_detailed_stdout, z2\n"
    )


def test_export_of_a_missing_store_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.sqlite"
    assert cli.main(["export", "z2", "--store", str(missing)]) == 1
    assert capsys.readouterr().err == f"dsmon: export: no store at {missing}\n"
    assert not missing.exists()


def test_parse_output_imports_like_the_log(tmp_path: Path) -> None:
    """``dsmon parse > f`` then ``dsmon import f`` stores what importing the log stores."""
    out = tmp_path / "parsed.txt"
    with out.open("w") as f, contextlib.redirect_stdout(f):
        assert cli.main(["parse", str(Z2 / "train.log"), "--run", "z2"]) == 0
    with open_store(tmp_path / "a.sqlite") as a, open_store(tmp_path / "b.sqlite") as b:
        import_paths(a, [Z2 / "train.log"], run="z2")
        (res,) = import_paths(b, [out])
        assert list(res.runs) == ["z2"]
        assert by_kind(b, "z2") == by_kind(a, "z2")


def test_records_import_reports_progress_in_bytes(source: Path, tmp_path: Path) -> None:
    export(source, "z2", tmp_path / "z2.jsonl")
    totals: list[int] = []
    seen: list[int] = []

    def factory(total: int) -> object:
        totals.append(total)
        return seen.append

    with open_store(tmp_path / "b.sqlite") as store:
        import_paths(store, [tmp_path / "z2.jsonl"], progress_factory=factory)  # type: ignore[arg-type]
    size = (tmp_path / "z2.jsonl").stat().st_size
    assert totals == [size]
    assert sum(seen) == size


def test_parse_of_an_export_prints_it_back(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dsmon parse`` recognises an export too, and checks it: same lines out, bad ones named."""
    export(source, "z2", tmp_path / "z2.jsonl")
    text = (tmp_path / "z2.jsonl").read_text()
    (tmp_path / "z2.jsonl").write_text(text + '{"kind":"timer","src":{"run":"z2"},"step":-1}\n')
    capsys.readouterr()
    assert cli.main(["parse", str(tmp_path / "z2.jsonl")]) == 0
    out, err = capsys.readouterr()
    assert out == text
    assert "unparsed record: 1" in err
    assert "z2.jsonl:120: field 'group': required by kind 'timer' but missing" in err
