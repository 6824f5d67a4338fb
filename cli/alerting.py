"""The alert options of ``dsmon dashboard``, ``serve`` and ``watch``, and the watcher they start.

With a webhook (``--alert-webhook`` or ``$DSMON_ALERT_WEBHOOK``) or ``--health-metrics``,
these processes evaluate the health checklist of recent runs in the background
(``dsmon.watch.health``): ``/metrics`` exports each rule's status, and with a webhook every
rule that turns to FAIL is posted. It is opt-in because the checklist loads pandas and the
health rules and reads each recent run from the store: an ingest server alone never needs them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cli.errors import CommandError
from dsmon.watch.alert_defaults import (
    FORMATS,
    INTERVAL_S,
    MIN_GAP_S,
    WEBHOOK_ENV,
    webhook_url,
)

if TYPE_CHECKING:  # loaded on use: building the command line must stay light
    from dsmon.watch.alerts import AlertTarget
    from dsmon.watch.health import HealthWatcher


def add_alert_options(p: argparse.ArgumentParser) -> None:
    """``--alert-webhook``, ``--alert-format``, ``--dashboard-url`` and the timings."""
    p.add_argument(
        "--alert-webhook",
        metavar="URL",
        help=f"POST health rules that turn to FAIL to this URL (else ${WEBHOOK_ENV})",
    )
    p.add_argument(
        "--alert-format",
        choices=FORMATS,
        default="json",
        help='body of each post: json (generic) or slack ({"text": ...}); default json',
    )
    p.add_argument(
        "--dashboard-url",
        metavar="URL",
        help="the dashboard's address as people open it, for the links in alerts",
    )
    p.add_argument(
        "--alert-min-gap",
        type=float,
        default=MIN_GAP_S,
        metavar="S",
        help=f"seconds between two posts at least (default {MIN_GAP_S:g}); alerts in between "
        "go out together",
    )
    p.add_argument(
        "--health-metrics",
        action="store_true",
        help="export each health rule's status on /metrics (dsmon_health_rule); on with a webhook",
    )
    p.add_argument(
        "--health-interval",
        type=float,
        default=INTERVAL_S,
        metavar="S",
        help=f"seconds between two evaluations of the runs' health (default {INTERVAL_S:g})",
    )


def start_watcher(
    args: argparse.Namespace, store_url: str, command: str, dashboard_url: str | None = None
) -> HealthWatcher | None:
    """The health watcher thread, with an alerter when a webhook is configured.

    None when neither a webhook nor ``--health-metrics`` asks for it. ``dashboard_url`` is
    the default for links when ``--dashboard-url`` is not given.

    Raises:
        CommandError: a bad webhook URL or timing, or a store that cannot be opened.
    """
    check_alert_options(args, command)
    if webhook_url(args.alert_webhook) is None and not args.health_metrics:
        return None  # not asked for: the checklist's modules (pandas) stay unloaded
    from dsmon.store.errors import StoreError
    from dsmon.store.store import open_store
    from dsmon.watch.alerts import Alerter, shown_url
    from dsmon.watch.health import HealthWatcher

    target = _target(args, command, dashboard_url)
    alerter = None if target is None else Alerter(target, min_gap_s=args.alert_min_gap)
    try:
        store = open_store(store_url)
    except StoreError as exc:
        raise CommandError(f"{command}: {exc}") from None
    if target is not None:
        print(
            f"dsmon {command}: alerts go to {shown_url(target.webhook)} ({target.fmt})", flush=True
        )
    return HealthWatcher(store, alerter, interval_s=args.health_interval).start()


def check_alert_options(args: argparse.Namespace, command: str) -> None:
    """Refuse bad alert options before the command starts anything (or probes its ports).

    Raises:
        CommandError: a bad webhook URL, format or timing.
    """
    if args.alert_min_gap < 0 or args.health_interval <= 0:
        raise CommandError(f"{command}: --alert-min-gap and --health-interval must be positive")
    if webhook_url(args.alert_webhook) is not None:  # else nothing to check, nothing loaded
        _target(args, command, None)


def _target(
    args: argparse.Namespace, command: str, dashboard_url: str | None
) -> AlertTarget | None:
    """Where alerts go, from ``--alert-webhook`` and ``--alert-format``; None: nowhere."""
    from dsmon.watch.alerts import target_from

    try:
        return target_from(
            args.alert_webhook, args.alert_format, args.dashboard_url or dashboard_url
        )
    except ValueError as exc:
        raise CommandError(f"{command}: {exc}") from None


def stop_watcher(watcher: HealthWatcher | None) -> None:
    """Stop the watcher :func:`start_watcher` started, if it started one."""
    if watcher is not None:
        watcher.stop()
