"""The store's frames per run, shared by every session: kept while shown, let go when not."""

from __future__ import annotations

from pathlib import Path

from dsmon.store.store import open_store
from dsmon.view.hub import IDLE_S, IN_USE_S, KEEP_RUNS, FrameHub


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_run_nobody_asked_for_is_let_go_and_read_again_when_asked(tmp_path: Path) -> None:
    clock = Clock()
    hub = FrameHub(open_store(tmp_path / "s.sqlite"), clock=clock)
    shown, other = hub.run("shown"), hub.run("other")
    for _ in range(int(IDLE_S // 2) + 2):  # "shown" redraws every 2 s, "other" is left
        clock.now += 2
        assert hub.run("shown") is shown
    assert hub.kept() == ["shown"]
    assert hub.run("other") is not other  # a new one, read as at a first opening


def test_past_the_count_only_runs_not_in_use_go(tmp_path: Path) -> None:
    clock = Clock()
    hub = FrameHub(open_store(tmp_path / "s.sqlite"), clock=clock)
    names = [f"run{i}" for i in range(KEEP_RUNS + 4)]
    first = {n: hub.run(n) for n in names}  # a Compare page of 20 runs, all in use
    assert hub.kept() == names
    clock.now += IN_USE_S / 2
    assert all(hub.run(n) is first[n] for n in names)  # nothing read again
    clock.now += IN_USE_S * 2
    hub.run("run0")  # the others were not asked for in a while: only KEEP_RUNS stay
    assert len(hub.kept()) == KEEP_RUNS and hub.kept()[-1] == "run0"
    assert hub.kept()[:-1] == names[-(KEEP_RUNS - 1) :]
