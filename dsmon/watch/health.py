"""The health checklist of every recent run, kept current in the background.

``dsmon dashboard``, ``dsmon serve`` and ``dsmon watch`` start a :class:`HealthWatcher`
thread. Every ``interval_s`` seconds it evaluates the checklist of each run written to in the
last :data:`RECENT_S` seconds, and:

- keeps each rule's status in :class:`RuleStates`, which ``/metrics`` exports as
  ``dsmon_health_rule{run=, rule=, status=}`` (1 for the current status, 0 for the others),
  and the run's state (:func:`dsmon.health.run_state.judge`) as
  ``dsmon_run_state{run=, state=}``;
- hands the verdicts to an :class:`dsmon.watch.alerts.Alerter` when a webhook is configured.

The checklist is read from the store through ``dsmon.health`` (its gather-from-store path, as
``dsmon check --store`` reads it), one run at a time, and nothing of it is kept between
rounds but the verdicts and a few times per run: an ingest server holds no copy of the runs'
frames. The rules that do not read the clock are evaluated again only when the run got new
records; the clock rules (:data:`dsmon.health.live.CLOCK_RULES`: a stall is the absence of
new records) run on every round, against the wall clock for a run a collector delivers
(however long it has been silent: silence is no end) and as of the end of its record for an
imported one. As the dashboard does, the watcher notes when each kind of
record last arrived (:data:`dsmon.health.inputs.NEWEST_TS`): timer lines printed without a
time of their own (DeepSpeed's default log level) show a run going on, or stalled, by their
arrival. A finished run met for the first time (the store was opened on old runs) is recorded
without alerts: only what goes wrong from then on is news.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from dsmon.health import probe_measures
from dsmon.health.gather import FRAME_KINDS, inputs_from_store
from dsmon.health.inputs import NEWEST_TS, HealthInputs
from dsmon.health.live import CLOCK_RULES, is_live, merged, run_is_live
from dsmon.health.model import CheckResult, Status
from dsmon.health.registry import all_rules, evaluate, run_rule
from dsmon.health.run_state import State, judge
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import Store
from dsmon.watch.alert_defaults import INTERVAL_S
from dsmon.watch.alerts import Alerter

logger = logging.getLogger(__name__)

#: Runs written to within this many seconds are watched; older ones leave the gauges.
RECENT_S = 24 * 3600.0
#: The probe's kinds: their newest time is the store's summaries', not an arrival's.
_PROBE_KINDS = frozenset({"rank_step", "heartbeat"})
#: The kinds whose arrival counts as their newest time (a GPU's is its samples' own).
_ARRIVING_KINDS = frozenset(FRAME_KINDS) - _PROBE_KINDS


class RuleStates:
    """The latest status of each rule of each watched run; read by ``/metrics`` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, dict[str, Status]] = {}
        self._run_states: dict[str, State] = {}

    def set_run(
        self, run: str, results: tuple[CheckResult, ...], state: State | None = None
    ) -> None:
        """Replace one run's statuses, and its state when given."""
        with self._lock:
            self._states[run] = {r.rule_id: r.status for r in results}
            if state is not None:
                self._run_states[run] = state

    def keep_only(self, runs: set[str]) -> None:
        """Forget runs no longer watched."""
        with self._lock:
            self._states = {k: v for k, v in self._states.items() if k in runs}
            self._run_states = {k: v for k, v in self._run_states.items() if k in runs}

    def snapshot(self) -> dict[str, dict[str, Status]]:
        """A copy: run -> rule id -> status."""
        with self._lock:
            return {run: dict(rules) for run, rules in self._states.items()}

    def run_states(self) -> dict[str, State]:
        """A copy: run -> its state."""
        with self._lock:
            return dict(self._run_states)


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
        runs = GaugeMetricFamily(
            "dsmon_run_state",
            "What the run is doing, from its evidence: 1 for its current state (starting, "
            "training, silent, stalled, hung, finished, crashed, ended, unknown), 0 for the others",
            labels=["run", "state"],
        )
        for run, now in sorted(self.states.run_states().items()):
            for state in State:
                runs.add_metric([run, state.value], float(state is now))
        yield runs


@dataclass(slots=True)
class _Seen:
    """What the watcher keeps of one run between rounds: no frame, a few times and verdicts.

    ``version`` tells whether the run got new records (or had stored rows' steps filled in)
    since ``static``, the verdicts of the rules that do not read the clock, were evaluated.
    ``counts`` are its records per kind at the last round, ``arrived`` when a round last saw
    rows of a kind arrive, ``stamped`` each kind's newest own time at the last evaluation.
    """

    version: tuple[int, int] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    arrived: dict[str, pd.Timestamp] = field(default_factory=dict)
    stamped: dict[str, pd.Timestamp] = field(default_factory=dict)
    static: tuple[CheckResult, ...] = ()

    def newest_ts(self) -> pd.DataFrame:
        """Each kind's newest time (index: kind), or when its rows last arrived if later.

        The frame :data:`dsmon.health.inputs.NEWEST_TS` names, as the dashboard keeps it.
        """
        stamps = dict(self.stamped)
        for kind, at in self.arrived.items():
            stamps[kind] = max(stamps[kind], at) if kind in stamps else at
        return pd.DataFrame({"ts": pd.Series(stamps, dtype="datetime64[ns]")})


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
        self._seen: dict[str, _Seen] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """One round: evaluate every recent run, update the states, post what is due."""
        now = self.clock()
        recent = [i for i in self.store.runs() if _recent(i, now)]
        for info in recent:
            first = info.name not in self._seen
            results, state = self._evaluate(info, now)
            self.states.set_run(info.name, results, state)
            if self.alerter is not None:
                announce = not first or run_is_live(info, now)
                self.alerter.observe(info.name, _alerted(results), announce=announce)
        names = {i.name for i in recent}
        self.states.keep_only(names)
        self._seen = {k: v for k, v in self._seen.items() if k in names}
        if self.alerter is not None:
            self.alerter.flush()

    def _evaluate(self, info: RunInfo, now: datetime) -> tuple[tuple[CheckResult, ...], State]:
        """The run's checklist as its Health page shows it, read from the store, and its state.

        The rules that do not read the clock run again only when the run got new records;
        the clock rules run on every round, reading only the frames they need: against the
        wall clock for a run a collector delivers, as of its record's end for an import.
        """
        seen = self._seen.get(info.name)
        if seen is None:
            seen = self._seen[info.name] = _Seen()
        else:  # rows that arrived since the last round, as the dashboard's refresh notes them
            at = pd.Timestamp(now)
            grew = [k for k, n in info.kinds.items() if n > seen.counts.get(k, 0)]
            seen.arrived.update({k: at for k in grew if k in _ARRIVING_KINDS})
        seen.counts = dict(info.kinds)
        inputs = inputs_from_store(
            self.store, info.name, views={NEWEST_TS: seen.newest_ts}, eager=False
        )
        version = (info.last_id, self.store.restamps(info.name))
        if version != seen.version:
            rules = [r for r in all_rules() if r.id not in CLOCK_RULES]
            seen.static = evaluate(inputs, rules).results
            seen.stamped = _stamped(inputs)
            seen.version = version
        live = dataclasses.replace(inputs, now=now if info.received_at is not None else None)
        clock = {r.id: run_rule(r, live) for r in all_rules() if r.id in CLOCK_RULES}
        return merged(seen.static, clock), judge(live).state

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


#: The rule that states the run's state; its failure names its cause's rule (``ranks.hang``...).
_STATE_RULE = "run.state"


def _alerted(results: tuple[CheckResult, ...]) -> tuple[CheckResult, ...]:
    """The results alerts are made of: one alert per cause, not the state and its cause both.

    A crash fails ``run.state`` and ``run.errors`` alike, a hang ``run.state`` and
    ``ranks.hang``: the cause's rule, which says the same with its evidence, is posted. The
    state's own failure is posted when no other rule fails with it.
    """
    failing = {r.rule_id for r in results if r.status is Status.FAIL}
    if _STATE_RULE in failing and len(failing) > 1:
        return tuple(r for r in results if r.rule_id != _STATE_RULE)
    return results


def _stamped(inputs: HealthInputs) -> dict[str, pd.Timestamp]:
    """Each kind's newest own time: the frames' ``ts``, the probe's from the store's summaries."""
    out = {}
    for kind in FRAME_KINDS:
        if kind in _PROBE_KINDS or inputs.has_rows(kind):
            newest = probe_measures.newest_ts(inputs, kind)
            if newest is not None:
                out[kind] = pd.Timestamp(newest)
    return out


def _recent(info: RunInfo, now: datetime) -> bool:
    """Whether a run got records (or was stamped) within :data:`RECENT_S` of ``now``.

    An imported run counts by its lines' times: it is watched too, judged as of its end.
    """
    return is_live(info.received_at, now, RECENT_S) or is_live(info.last_ts, now, RECENT_S)
