"""The alerting settings' names and defaults, apart from the alerting code.

``dsmon dashboard`` and ``dsmon serve`` build their command line on every start, also when no
alert is configured; importing :mod:`dsmon.watch.alerts` or :mod:`dsmon.watch.health` there would
load pandas and the health rules for nothing (half a second on each ``dsmon --help``).
"""

from __future__ import annotations

import os

#: Environment variable naming the webhook when ``--alert-webhook`` is not given.
WEBHOOK_ENV = "DSMON_ALERT_WEBHOOK"
#: Body formats of a post: generic JSON, or Slack's ``{"text": ...}``.
FORMATS = ("json", "slack")
#: Seconds between two posts at most once (the rate limit).
MIN_GAP_S = 60.0
#: Seconds between two rounds of the health watcher.
INTERVAL_S = 15.0


def webhook_url(flag: str | None) -> str | None:
    """The webhook ``--alert-webhook`` names, else ``$DSMON_ALERT_WEBHOOK``; None if neither."""
    return flag or os.environ.get(WEBHOOK_ENV) or None
