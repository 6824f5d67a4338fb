"""Alerts when a health rule turns to FAIL, posted to a real HTTP receiver on 127.0.0.1.

The run is the real crash run tests/data/events_crash_step17 (DeepSpeed 0.19.8, 2 ranks; both
workers raise at step 17, the launcher reports exit codes 1). Its records before the first
``[rank0]: Traceback`` (train.log line 244) reach the store first, as a live collector
sends them; there no rule FAILs. The rest then arrives and ``run.errors`` turns to FAIL.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import read_records
from prometheus_client.parser import text_string_to_metric_families
from server_support import call, ndjson, stop_later

from cli.main import main
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Status
from dsmon.health.registry import evaluate
from dsmon.health.run_state import State
from dsmon.model.records import EventRecord, Record
from dsmon.serve.run import start_ingest_server
from dsmon.store.store import open_store
from dsmon.watch.alerts import Alerter, AlertTarget
from dsmon.watch.health import HealthWatcher

TOKEN = "test-token-0123456789abcdef"
#: How run.errors names the crash: the first rank to die, then the other.
FIRST = (
    "rank 0 died first: RuntimeError: [train.py] deliberate crash at step 17 (rank 0); then "
    "rank 1 failed (RuntimeError: [train.py] deliberate crash at step 17 (rank 1)); exit status 1"
)
DASH = "http://dash.example:8501"


class Receiver:
    """A webhook on 127.0.0.1: keeps every JSON body it gets; answers ``status``."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.status = 200
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                if outer.status == 200:
                    outer.bodies.append(body)
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        # a short poll: shutdown() waits for the loop's next poll (0.5 s by default)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def crash_parts(run: str = "crash") -> tuple[list[Record], list[Record]]:
    """The crash run's records before its first traceback, and from there on."""
    recs = read_records("events_crash_step17", run)
    cut = next(
        i for i, r in enumerate(recs) if isinstance(r, EventRecord) and r.name == "traceback"
    )
    return recs[:cut], recs[cut:]


def watcher(path: Path, url: str, fmt: str = "json", gap: float = 0.0) -> HealthWatcher:
    return HealthWatcher(open_store(path), Alerter(AlertTarget(url, fmt, DASH), min_gap_s=gap))


def test_rule_turning_to_fail_is_posted_once_with_a_link(
    tmp_path: Path, receiver: Receiver
) -> None:
    path = tmp_path / "s.sqlite"
    before, after = crash_parts()
    w = watcher(path, receiver.url)
    with open_store(path) as store:
        store.add(before, live=True)
        w.tick()
        assert receiver.bodies == []  # nothing failed yet
        assert w.states.snapshot()["crash"]["run.errors"].value == "pass"
        store.add(after, live=True)
    w.tick()
    w.tick()  # still failing: not posted again
    w.stop()
    (body,) = receiver.bodies
    assert body["source"] == "dsmon"
    (alert,) = body["alerts"]
    assert (alert["run"], alert["rule"], alert["status"]) == ("crash", "run.errors", "fail")
    assert alert["url"] == f"{DASH}/steps?run=crash"
    # two [rankN]: tracebacks, "exits with return code = 1" once; steps_per_print 5. The
    # run's state fails with it (crashed): one alert per cause, the cause's rule's
    assert alert["summary"] == (
        f"{FIRST}; 2 error event(s), 1 failed worker(s); last step line: step 15"
    )
    assert w.states.snapshot()["crash"]["run.state"] is Status.FAIL


def test_slack_text(tmp_path: Path, receiver: Receiver) -> None:
    path = tmp_path / "s.sqlite"
    before, after = crash_parts("crash run")
    w = watcher(path, receiver.url, "slack")
    with open_store(path) as store:
        store.add(before + after, live=True)
    w.tick()
    w.stop()
    (body,) = receiver.bodies
    assert list(body) == ["text"]
    lines = body["text"].splitlines()
    assert lines[0] == "dsmon: 1 health check(s) failed"
    assert lines[1].startswith("• FAIL run.errors (crash run): ")
    assert lines[1].endswith(f"<{DASH}/steps?run=crash%20run|open>")


def test_rate_limit_holds_and_batches_and_a_down_webhook_keeps_them(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Two crash runs fail one after the other inside the gap: the second waits, then goes."""
    path = tmp_path / "s.sqlite"
    now = [0.0]
    w = watcher(path, receiver.url, gap=60.0)
    assert w.alerter is not None
    w.alerter.clock = lambda: now[0]
    first = crash_parts("a")
    second = crash_parts("b")
    with open_store(path) as store:
        store.add(first[0] + first[1] + second[0], live=True)
        w.tick()
        assert [[a["run"] for a in b["alerts"]] for b in receiver.bodies] == [["a"]]
        store.add(second[1], live=True)
    now[0] = 30.0
    w.tick()
    assert len(receiver.bodies) == 1  # held by the rate limit
    receiver.status = 500
    now[0] = 61.0
    w.tick()
    assert len(receiver.bodies) == 1 and len(w.alerter.pending) == 1  # kept for the next try
    receiver.status = 200
    now[0] = 122.0
    w.tick()
    w.stop()
    assert [[a["run"] for a in b["alerts"]] for b in receiver.bodies] == [["a"], ["b"]]


def test_a_finished_run_is_not_news_and_recovery_rearms(tmp_path: Path) -> None:
    """A finished run met first is baseline; a rule is announced again only after recovering."""
    path = tmp_path / "s.sqlite"
    with open_store(path) as store:
        store.add(sum(crash_parts(), []))  # imported: no live sender
        (info,) = store.runs()
    assert info.last_ts is not None
    later = datetime.fromisoformat(info.last_ts) + timedelta(minutes=10)
    posted: list[Any] = []
    alerter = Alerter(
        AlertTarget(DASH + "/hook"), min_gap_s=0, send=lambda url, body, t: posted.append(body)
    )
    w = HealthWatcher(open_store(path), alerter, clock=lambda: later)
    w.tick()
    w.stop()
    assert posted == []
    assert w.states.snapshot()["crash"]["run.errors"] is Status.FAIL
    inputs = inputs_from_records(sum(crash_parts(), []), run="crash")
    (failed,) = [r for r in evaluate(inputs).results if r.rule_id == "run.errors"]
    recovered = dataclasses.replace(failed, status=Status.PASS)
    # still failing (known since the baseline), recovers, fails, fails, recovers, fails
    for results in ([failed], [recovered], [failed], [failed], [recovered], [failed]):
        alerter.observe("crash", results)
        alerter.flush()
    assert [[a["rule"] for a in b["alerts"]] for b in posted] == [["run.errors"], ["run.errors"]]


def test_metrics_gauge_per_rule_state(tmp_path: Path) -> None:
    """Records posted to the ingest server; /metrics then tells each rule's status."""
    path = tmp_path / "s.sqlite"
    w = HealthWatcher(open_store(path))
    srv = start_ingest_server(str(path), TOKEN, "127.0.0.1", 0, health=w.states)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"}
        status, _, _ = call(srv, "POST", "/v1/records", ndjson(sum(crash_parts(), [])), headers)
        assert status == 200
        w.tick()
        _, _, data = call(srv, "GET", "/metrics")
    finally:
        stop_later(srv)
        w.stop()
    samples = {
        (s.labels["rule"], s.labels["status"]): s.value
        for fam in text_string_to_metric_families(data.decode())
        for s in fam.samples
        if s.name == "dsmon_health_rule" and s.labels["run"] == "crash"
    }
    assert samples[("run.errors", "fail")] == 1.0
    assert samples[("run.errors", "pass")] == 0.0
    assert samples[("zero.overlap_comm", "n/a")] == 1.0  # a CPU run: no streams to overlap on
    assert sum(samples.values()) == len({rule for rule, _ in samples})  # one status each
    # and the run's state, the one dsmon check and every page say
    states = {
        s.labels["state"]: s.value
        for fam in text_string_to_metric_families(data.decode())
        for s in fam.samples
        if s.name == "dsmon_run_state" and s.labels["run"] == "crash"
    }
    assert states["crashed"] == 1.0 and sum(states.values()) == 1.0
    assert set(states) == {s.value for s in State}


@pytest.mark.slow  # a real process
def test_dsmon_serve_posts_alerts_from_the_environment(tmp_path: Path, receiver: Receiver) -> None:
    """A real ``dsmon serve`` process, the webhook from $DSMON_ALERT_WEBHOOK, Slack format."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSMON_")}
    cmd = [sys.executable, "-m", "cli.main", "serve", "--store", str(tmp_path / "s.sqlite")]
    cmd += ["--port", "0", "--token-file", str(token_file), "--alert-format", "slack"]
    cmd += ["--dashboard-url", DASH, "--health-interval", "0.2"]
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, text=True, env={**env, "DSMON_ALERT_WEBHOOK": receiver.url}
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        port = int(line.split("http://127.0.0.1:")[1].split(",")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"}
        conn.request("POST", "/v1/records", ndjson(sum(crash_parts(), [])), headers)
        assert conn.getresponse().status == 200
        conn.close()
        deadline = time.monotonic() + 30
        while not receiver.bodies and time.monotonic() < deadline:
            time.sleep(0.1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert 'dsmon_health_rule{rule="run.errors",run="crash",status="fail"} 1.0' in metrics
    (body,) = receiver.bodies
    assert body["text"].splitlines()[1] == (
        f"• FAIL run.errors (crash): {FIRST}; 2 error event(s), 1 failed worker(s); last step "
        f"line: step 15 <{DASH}/steps?run=crash|open>"
    )


def test_bad_webhook_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    argv = ["serve", "--store", str(tmp_path / "s.sqlite"), "--token-file", str(token_file)]
    assert main([*argv, "--alert-webhook", "ftp://hooks.example/x"]) == 1
    err = capsys.readouterr().err
    assert err == "dsmon: serve: alert webhook ftp://hooks.example/...: not an http(s) URL\n"


def test_watch_takes_the_alert_options_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dsmon watch`` (one machine, nothing to configure) alerts like dashboard and serve."""
    log = tmp_path / "train.log"
    log.write_text("")
    argv = ["watch", str(log), "--store", str(tmp_path / "s.sqlite"), "--no-browser"]
    assert main([*argv, "--alert-webhook", "ftp://hooks.example/x"]) == 1
    err = capsys.readouterr().err
    assert err == "dsmon: watch: alert webhook ftp://hooks.example/...: not an http(s) URL\n"


@pytest.mark.slow  # real processes
def test_no_alerts_asked_loads_no_checklist(tmp_path: Path) -> None:
    """Without a webhook or ``--health-metrics`` no watcher starts, and ``dsmon serve`` does
    not load the checklist's modules (pandas: some 80 MB of a sidecar's memory)."""
    code = (
        "import os, sys\n"
        "from cli.main import build_parser\n"
        "from cli.alerting import start_watcher\n"
        "os.environ.pop('DSMON_ALERT_WEBHOOK', None)\n"
        f"args = build_parser().parse_args(['serve', '--store', {str(tmp_path / 's.sqlite')!r}]"
        " + sys.argv[1:])\n"
        "watcher = start_watcher(args, args.store, 'serve')\n"
        "print(watcher is None, 'pandas' in sys.modules)\n"
        "if watcher is not None: watcher.stop()\n"
    )

    def run(*extra: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", code, *extra], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    assert run() == "True False"
    assert run("--health-metrics") == "False True"


def test_the_watcher_reads_the_store_and_sees_untimed_timer_lines_arrive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At DeepSpeed's default log level the timer lines carry a start-up line's time
    (tests/data/z0_default_loglevel): the watcher, as the dashboard, counts when they arrived,
    so a run going on passes and a run whose steps stop while its GPUs are still sampled
    fails. The rules that do not read the clock run again only once new records came."""
    from dsmon.model.records import GpuSampleRecord, Source, TimerRecord
    from dsmon.watch import health as watch_health

    recs = [r for r in read_records("z0_default_loglevel", "z0") if r.KIND != "event"]
    globals_at = [
        i for i, r in enumerate(recs) if isinstance(r, TimerRecord) and r.group == "global"
    ]
    cut = globals_at[9] + 1
    assert {r.ts for r in recs if isinstance(r, TimerRecord)} == {"2026-11-29T14:10:05.577"}
    clock = [datetime.now()]

    def sampled() -> GpuSampleRecord:
        ts = clock[0].isoformat(timespec="milliseconds")
        return GpuSampleRecord(src=Source(run="z0", node="n1"), ts=ts, gpu_index=0, name="H100")

    evaluations: list[int] = []
    counted = watch_health.evaluate
    monkeypatch.setattr(watch_health, "evaluate", lambda *a: evaluations.append(1) or counted(*a))
    path = tmp_path / "s.sqlite"
    w = HealthWatcher(open_store(path), clock=lambda: clock[0])
    with open_store(path) as s:
        s.add([*recs[:cut], sampled()], live=True)
        w.tick()  # the first look
        clock[0] += timedelta(seconds=5)
        s.add([*recs[cut:], sampled()], live=True)
        w.tick()
        assert w.states.snapshot()["z0"]["run.stalled"] is Status.PASS
        assert len(evaluations) == 2
        w.tick()  # nothing new: the clock rules only
        assert len(evaluations) == 2
        clock[0] += timedelta(minutes=10)  # no step since, but the GPUs are still sampled
        s.add([sampled()], live=True)
        w.tick()
    w.stop()
    assert len(evaluations) == 3
    assert w.states.snapshot()["z0"]["run.stalled"] is Status.FAIL
