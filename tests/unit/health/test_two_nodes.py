"""A real two-node job sent by two collectors (tests/data/two_nodes_torchrun).

No line of its output says how many nodes ran it (torchrun prints no ``WORLD INFO DICT``): the
records' node names do. The dashboard's checklist read no node names and judged
network.compression "number of nodes unknown", where ``dsmon check --store`` said 2 nodes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_support import app_at
from shared_fixtures import DATA

from dsmon.health import Status, evaluate
from dsmon.health.gather import inputs_from_store
from dsmon.load.files import import_paths
from dsmon.store.store import open_store
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN
from dsmon.view.health_panel import panel

RECORDS = DATA / "two_nodes_torchrun" / "records.jsonl"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite"
    with open_store(path) as store:
        import_paths(store, [RECORDS])
    return path


def test_dashboard_and_check_judge_every_rule_alike(store_path: Path) -> None:
    with open_store(store_path) as store:
        (info,) = store.runs()
        assert info.nodes == ("node0", "node1")
        by_check = evaluate(inputs_from_store(store, "job2n"))
        shown = panel(RunFrames(store, "job2n"), "job2n", OPEN, None).checklist
        statuses = {r.rule_id: r.status for r in shown.results}
        assert statuses == {r.rule_id: r.status for r in by_check.results}
    assert statuses["network.compression"] is Status.UNKNOWN  # 2 nodes, no comms logger


def test_health_page_names_the_nodes(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSMON_STORE", str(store_path))
    at = app_at(str(store_path), "job2n", "health")
    assert not at.exception
    # network.compression could not tell (no comms logger): listed with what it saw
    (network,) = [
        e for e in at.expander if any("`network.compression`" in str(m.value) for m in e.markdown)
    ]
    assert network.label.startswith(":gray-badge[UNKNOWN]")
    shown = " ".join(str(m.value) for m in network.markdown).replace("**", "")
    line = shown.index("`network.compression`")
    assert "    - nodes = 2 (node names of the records)" in shown[line:]
