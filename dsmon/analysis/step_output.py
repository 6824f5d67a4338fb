"""Whether a run's output says anything per step, and the two ways to make it say it.

At DeepSpeed's defaults (no ``wall_clock_breakdown``, ``steps_per_print`` printing at INFO,
which the workers do not log from 0.17.6) a training log holds start-up lines and nothing per
step: a dashboard shows no step, and a user cannot tell a silent run from a broken monitor.
``dsmon watch`` and the Steps page say so, with the two ways to get steps.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Record kinds that place something on the step axis: engine timers, ``step=`` and
#: throughput lines, a framework's iteration lines, csv_monitor points, the probe's steps.
STEP_KINDS = ("timer", "step", "throughput", "iteration", "monitor", "rank_step")
#: Kinds that show the job started (DeepSpeed's launcher and engine lines).
STARTED_KINDS = ("event", "config")
#: The probe's heartbeat: with it, steps come as soon as training does (``dsmon run``).
PROBE_KIND = "heartbeat"

#: What to say, line by line: the finding, then the two ways.
NO_STEP_OUTPUT = (
    "This run's output has nothing per step (DeepSpeed's defaults print no step line), so "
    "there are no step times, loss or throughput to show. Two ways to get them:",
    "1. start the job with dsmon's probe: `dsmon run -- deepspeed train.py ...` (every "
    "rank's step times, the loss, the gradient norm and every collective, with no change to "
    "the script or the config);",
    '2. or have DeepSpeed print them: `"wall_clock_breakdown": true` and `"steps_per_print": '
    '10` in the DeepSpeed config (from DeepSpeed 0.17.6, also `"log_level": "info"`).',
)


def has_step_output(kinds: Mapping[str, int]) -> bool:
    """Whether records of any :data:`STEP_KINDS` are among ``kinds`` (counts per kind)."""
    return any(kinds.get(k, 0) > 0 for k in STEP_KINDS)


def lacks_step_output(kinds: Mapping[str, int]) -> bool:
    """Whether the job has started (DeepSpeed's lines are there) and nothing is per step.

    A run with the probe's heartbeats is not told: its steps come with its first one.
    """
    started = any(kinds.get(k, 0) > 0 for k in STARTED_KINDS)
    return started and not has_step_output(kinds) and not kinds.get(PROBE_KIND, 0)
