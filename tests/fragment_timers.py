"""Fragment timers of the dashboard under AppTest, fired the way a browser fires them.

``st.fragment(run_every=...)`` sends the browser an ``auto_rerun`` message (fragment id and
period); the browser then asks the server, every period, to run that fragment alone, and the
server runs it with the session's other elements left as they are. AppTest has no browser and
no clock of its own: :class:`Timers` keeps the timers each run set and runs one fragment alone
on request, through the same ``RerunData`` a browser's request becomes on the server.

One more difference is put right here. A real server leaves Streamlit's pages-folder mode for
good once ``st.navigation`` has run (``PagesManager.uses_pages_directory = False``); AppTest
resets it before every run, so a rerun after the first ran ``pages/<page>.py`` alone, without
app.py and its sidebar. Once the app has navigated, Timers keeps the flag as a server does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner.script_runner import ScriptRunnerEvent
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequests
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.local_script_runner import LocalScriptRunner


class Timers:
    """The fragment timers the app has set, and how many full runs the last AppTest run made.

    ``every`` maps fragment id -> period (s), as the browser holds them: a full run replaces
    them all, a fragment run keeps them (less any the server told the browser to stop).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.every: dict[str, float] = {}
        self.full_runs = 0
        self._fire: str | None = None
        self._navigated = False
        self._patch(monkeypatch)

    def fire(self, at: AppTest, period: float) -> AppTest:
        """Run the one fragment whose timer has ``period``, as its browser timer would."""
        due = [fid for fid, every in self.every.items() if every == period]
        assert len(due) == 1, f"one timer of {period} s expected, the app set {self.every}"
        self._fire = due[0]
        return at.run()

    def _patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        run, request, init = (
            LocalScriptRunner.run,
            LocalScriptRunner.request_rerun,
            PagesManager.__init__,
        )

        def counted_run(runner: LocalScriptRunner, *args: Any, **kwargs: Any) -> Any:
            tree = run(runner, *args, **kwargs)
            self._note(runner)
            return tree

        def fired_request(runner: LocalScriptRunner, data: RerunData) -> Any:
            if self._fire is not None:
                # A new runner starts with a full run pending, which would absorb the
                # fragment's; a browser's request reaches a runner that has none.
                runner._requests = ScriptRequests()
                data = dataclasses.replace(data, fragment_id_queue=[self._fire], is_auto_rerun=True)
                self._fire = None
            return request(runner, data)

        def navigated_init(manager: PagesManager, *args: Any, **kwargs: Any) -> None:
            init(manager, *args, **kwargs)
            if self._navigated:
                PagesManager.uses_pages_directory = False

        monkeypatch.setattr(LocalScriptRunner, "run", counted_run)
        monkeypatch.setattr(LocalScriptRunner, "request_rerun", fired_request)
        monkeypatch.setattr(PagesManager, "__init__", navigated_init)

    def _note(self, runner: LocalScriptRunner) -> None:
        """Timers and full runs of the AppTest run that just ended."""
        starts = [
            data
            for event, data in zip(runner.events, runner.event_data, strict=True)
            if event == ScriptRunnerEvent.SCRIPT_STARTED
        ]
        full = [d for d in starts if not d.get("fragment_ids_this_run")]
        self.full_runs = len(full)
        if starts and not starts[-1].get("fragment_ids_this_run"):
            self.every = {}
        for msg in runner.forward_msgs():
            kind = msg.WhichOneof("type")
            if kind == "auto_rerun":
                self.every[msg.auto_rerun.fragment_id] = msg.auto_rerun.interval
            elif kind == "stop_auto_rerun":
                for fid in msg.stop_auto_rerun.fragment_ids:
                    self.every.pop(fid, None)
        self._navigated = self._navigated or PagesManager.uses_pages_directory is False
