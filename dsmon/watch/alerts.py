"""Webhook alerts: a health rule that turns to FAIL is posted to a chat or incident tool.

Nobody watches a dashboard all night. ``dsmon dashboard`` and ``dsmon serve`` can run a
:class:`dsmon.watch.health.HealthWatcher` that evaluates the checklist of every recent run in
the background; each rule that turns to FAIL is handed to an :class:`Alerter`, which posts
it to ``--alert-webhook`` as generic JSON or as a Slack-compatible ``{"text": ...}`` with a
link to the dashboard page that shows the data behind it.

The alerter keeps people's attention for what changed:

- de-duplicated: a rule of a run is announced once when it turns to FAIL, and again only
  after it has left FAIL (recovered) and failed anew;
- rate-limited: at most one post every ``min_gap_s`` seconds; what fails in between waits
  and goes out together in the next post, so a burst of failures is one message, not forty;
- a webhook that cannot be reached is logged and tried again at the next allowed time, with
  the waiting alerts kept (up to :data:`MAX_PENDING`).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from dsmon.health.model import CheckResult, Status
from dsmon.watch.alert_defaults import FORMATS, MIN_GAP_S, webhook_url

logger = logging.getLogger(__name__)

#: Seconds a post may take before it counts as failed.
POST_TIMEOUT_S = 10.0
#: Alerts kept while the webhook cannot be reached; the oldest go first past this many.
MAX_PENDING = 200

Sender = Callable[[str, Mapping[str, Any], float], None]


class AlertError(RuntimeError):
    """A webhook post that failed; the message names the URL and the reason, in one line."""


@dataclass(frozen=True, slots=True)
class AlertTarget:
    """Where alerts go and how they are written.

    Args:
        webhook: the URL each alert batch is POSTed to.
        fmt: ``json`` (``{"source", "alerts": [...]}``) or ``slack`` (``{"text": ...}``).
        dashboard_url: the dashboard's address as people open it, for links (None: no link).
    """

    webhook: str
    fmt: str = "json"
    dashboard_url: str | None = None

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"alert format {self.fmt!r}: not one of {', '.join(FORMATS)}")
        if not self.webhook.startswith(("http://", "https://")):
            raise ValueError(f"alert webhook {shown_url(self.webhook)}: not an http(s) URL")


def target_from(
    webhook: str | None, fmt: str = "json", dashboard_url: str | None = None
) -> AlertTarget | None:
    """The target from flags, else ``$DSMON_ALERT_WEBHOOK``; None when neither names one.

    Raises:
        ValueError: the format is unknown or the webhook is not an http(s) URL.
    """
    url = webhook_url(webhook)
    return None if url is None else AlertTarget(url, fmt, dashboard_url)


@dataclass(frozen=True, slots=True)
class Alert:
    """One rule of one run that turned to FAIL."""

    run: str
    rule_id: str
    title: str
    summary: str
    page: str | None = None

    @classmethod
    def of(cls, run: str, result: CheckResult) -> Alert:
        """The alert of a checklist line."""
        return cls(run, result.rule_id, result.title, result.summary, result.page)


def page_link(dashboard_url: str | None, run: str, page: str | None) -> str | None:
    """The dashboard page behind a rule for this run (the health page when it names none)."""
    if not dashboard_url:
        return None
    path = page or ""
    return f"{dashboard_url.rstrip('/')}/{path}?run={quote(run, safe='')}"


def payload(alerts: Sequence[Alert], target: AlertTarget) -> dict[str, Any]:
    """The JSON body of one post: generic JSON, or Slack's ``{"text": ...}``."""
    rows = [
        {
            "run": a.run,
            "rule": a.rule_id,
            "title": a.title,
            "status": Status.FAIL.value,
            "summary": a.summary,
            "url": page_link(target.dashboard_url, a.run, a.page),
        }
        for a in alerts
    ]
    if target.fmt == "json":
        return {"source": "dsmon", "alerts": rows}
    lines = [f"dsmon: {len(rows)} health check(s) failed"]
    for r in rows:
        link = f" <{r['url']}|open>" if r["url"] else ""
        lines.append(f"• FAIL {r['rule']} ({r['run']}): {r['summary']}{link}")
    return {"text": "\n".join(lines)}


def shown_url(url: str) -> str:
    """A webhook as logs show it: scheme and host only (a Slack webhook's path is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/..." if parts.path.strip("/") else url


def post_json(url: str, body: Mapping[str, Any], timeout_s: float) -> None:
    """POST ``body`` as JSON; any answer but 2xx, or no answer, raises AlertError."""
    shown = shown_url(url)
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        raise AlertError(f"alert webhook {shown}: HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise AlertError(f"alert webhook {shown}: {exc}") from None
    if not 200 <= status < 300:
        raise AlertError(f"alert webhook {shown}: HTTP {status}")


@dataclass
class Alerter:
    """Turns verdict changes into posts: once per rule and run until it recovers, rate-limited.

    Args:
        target: the webhook and format.
        min_gap_s: the least time between two posts.
        send: the function that posts (``post_json``; a test may pass another).
        clock: monotonic seconds (``time.monotonic``).
    """

    target: AlertTarget
    min_gap_s: float = MIN_GAP_S
    send: Sender = post_json
    clock: Callable[[], float] = time.monotonic
    failing: set[tuple[str, str]] = field(default_factory=set)
    pending: list[Alert] = field(default_factory=list)
    last_post: float | None = None
    sent: int = 0

    def observe(self, run: str, results: Sequence[CheckResult], announce: bool = True) -> None:
        """Note one run's verdicts; rules newly at FAIL are queued when ``announce``.

        ``announce=False`` records the verdicts without alerting (a finished run seen for the
        first time: its failures are old news).
        """
        for r in results:
            key = (run, r.rule_id)
            if r.status is not Status.FAIL:
                self.failing.discard(key)
                continue
            if key in self.failing:
                continue
            self.failing.add(key)
            if announce:
                self.pending.append(Alert.of(run, r))
        del self.pending[:-MAX_PENDING]

    def flush(self) -> int:
        """Post what is waiting, if the rate limit allows; returns how many alerts went out."""
        if not self.pending:
            return 0
        now = self.clock()
        if self.last_post is not None and now - self.last_post < self.min_gap_s:
            return 0
        self.last_post = now
        batch = list(self.pending)
        try:
            self.send(self.target.webhook, payload(batch, self.target), POST_TIMEOUT_S)
        except AlertError as exc:
            logger.warning("dsmon: %s; %d alert(s) kept for the next try", exc, len(batch))
            return 0
        del self.pending[: len(batch)]
        self.sent += len(batch)
        return len(batch)
