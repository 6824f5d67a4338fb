"""The health checklist of every recent run, kept current in the background.

``dsmon dashboard`` and ``dsmon serve`` start a :class:`HealthWatcher` thread. Every
``interval_s`` seconds it evaluates the checklist of each run written to in the last
:data:`RECENT_S` seconds, and:

- keeps each rule's status in :class:`RuleStates`, which ``/metrics`` exports as
  ``dsmon_health_rule{run=, rule=, status=}`` (1 for the current status, 0 for the others);
- hands the verdicts to an :class:`dsmon.watch.alerts.Alerter` when a webhook is configured.

The checklist is the Health page's own (``dsmon.view.health_panel`` over incrementally grown
frames): rules are re-evaluated only when the run got new records, except those that read
the clock (a stall is the absence of new records), which run on every round. A finished run met for the first time (the store
was opened on old runs) is recorded without alerts: only what goes wrong from then on is news.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from dsmon.health.model import CheckResult, Status
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import Store
from dsmon.view import step_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN
from dsmon.view.health_panel import panel
from dsmon.view.run_state import run_is_live
from dsmon.watch.alert_defaults import INTERVAL_S
from dsmon.watch.alerts import Alerter

logger = logging.getLogger(__name__)

#: Runs written to within this many seconds are watched; older ones leave the gauges.
RECENT_S = 24 * 3600.0


class RuleStates:
    """The latest status of each rule of each watched run; read by ``/metrics`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, dict[str, Status]] = {}

    def set_run(self, run: str, results: tuple[CheckResult, ...]) -> None:
        """Replace one run's statuses."""
        with self._lock:
            self._states[run] = {r.rule_id: r.status for r in results}

    def keep_only(self, runs: set[str]) -> None:
        """Forget runs no longer watched."""
        with self._lock:
            self._states = {k: v for k, v in self._states.items() if k in runs}

    def snapshot(self) -> dict[str, dict[str, Status]]:
        """A copy: run -> rule id -> status."""
        with self._lock:
            return {run: dict(rules) for run, rules in self._states.items()}


class HealthCollector:
    """A prometheus_client collector: ``dsmon_health_rule`` from :class:`RuleStates`."""

    def __init__(self, states: RuleStates) -> None:
        self.states = states

    def describe(self) -> list[Metric]:
        """Nothing up front (the states fill in once the watcher has run)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One sample per run, rule and status: 1 for the rule's current status, else 0."""
        fam = GaugeMetricFamily(
            "dsmon_health_rule",
            "Health rule verdict per run: 1 for the current status (pass, warn, fail, unknown, "
            "n/a), 0 for the others",
            labels=["run", "rule", "status"],
        )
        for run, rules in sorted(self.states.snapshot().items()):
            for rule_id, current in rules.items():
                for status in Status:
                    fam.add_metric([run, rule_id, status.value], float(status is current))
        yield fam


class HealthWatcher:
    """Evaluates recent runs' checklists every ``interval_s`` seconds in a daemon thread.

    Args:
        store: the store to read (the watcher's own connection; it closes it on :meth:`stop`).
        alerter: where rules that turn to FAIL go (None: statuses for ``/metrics`` only).
        interval_s: seconds between rounds.
        clock: the current local time (``datetime.now``), as the records' times are local.
    """

    def __init__(
        self,
        store: Store,
        alerter: Alerter | None = None,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        self.store = store
        self.alerter = alerter
        self.interval_s = interval_s
        self.clock = clock
        self.states = RuleStates()
        self._frames: dict[str, RunFrames] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """One round: evaluate every recent run, update the states, post what is due."""
        now = self.clock()
        recent = [i for i in self.store.runs() if _recent(i, now)]
        for info in recent:
            first = info.name not in self._frames
            results = self._evaluate(info, now)
            self.states.set_run(info.name, results)
            if self.alerter is not None:
                announce = not first or run_is_live(info, now)
                self.alerter.observe(info.name, results, announce=announce)
        names = {i.name for i in recent}
        self.states.keep_only(names)
        self._frames = {k: v for k, v in self._frames.items() if k in names}
        if self.alerter is not None:
            self.alerter.flush()

    def _evaluate(self, info: RunInfo, now: datetime) -> tuple[CheckResult, ...]:
        """The run's checklist exactly as its Health page computes it (``health.panel``).

        The frames grow incrementally and the rules that do not read the clock are
        memoised on them, so a round costs only what is new.
        """
        frames = self._frames.get(info.name)
        if frames is None:
            frames = RunFrames(self.store, info.name, folds=step_views.STEP_FOLDS)
            self._frames[info.name] = frames
        frames.refresh()
        live_now = now if run_is_live(info, now) else None
        return panel(frames, info.name, OPEN, live_now).checklist.results

    def _loop(self) -> None:
        """Rounds until stopped; a round that fails is logged, and the next one tries again."""
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - a bad round must not end the watch
                logger.warning("dsmon: health watch round failed: %s: %s", type(exc).__name__, exc)
            self._stop.wait(self.interval_s)

    def start(self) -> HealthWatcher:
        """Run :meth:`tick` every ``interval_s`` seconds in a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="dsmon-health-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread and close the store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.store.close()


def _recent(info: RunInfo, now: datetime) -> bool:
    """Whether a run got records (or was stamped) within :data:`RECENT_S` of ``now``."""
    return run_is_live(info, now, RECENT_S)
