"""How long a collective waits for a missing rank before the job fails, for the run at hand.

A hung or stalled run is reported with the time it has left: the process group's timeout,
after which the waiting ranks raise (NCCL's watchdog, gloo's timeout) and the launcher kills
the job. ``deepspeed.init_distributed`` sets it for every backend from DeepSpeed's own
default, which changed in 0.19.6 (:data:`dsmon.health.thresholds.COLLECTIVE_TIMEOUT_S`).
The run's backend names it, so a gloo job is not told about NCCL.
"""

from __future__ import annotations

from dsmon.ds_config.schema import LATEST_KNOWN
from dsmon.health import thresholds as th
from dsmon.health.inputs import HealthInputs


def timeout_s(inputs: HealthInputs) -> float:
    """DeepSpeed's default collective timeout for the run's version (the newest's if unknown)."""
    version = inputs.facts.ds_version or LATEST_KNOWN
    if version >= th.COLLECTIVE_TIMEOUT_SINCE:
        return th.COLLECTIVE_TIMEOUT_S
    return th.COLLECTIVE_TIMEOUT_BEFORE_S


def left_text(inputs: HealthInputs, waited_s: float) -> str:
    """``gloo's collective timeout (DeepSpeed's default 600 s) fires in about 559 s``."""
    backend = inputs.facts.backend
    whose = f"{backend}'s collective timeout" if backend else "the collective timeout"
    limit = timeout_s(inputs)
    left = max(limit - waited_s, 0.0)
    return f"{whose} (DeepSpeed's default {limit:g} s) fires in about {left:.0f} s"


#: How a rule's description names the timeout (no run at hand).
DESCRIBED = (
    f"the collective timeout (DeepSpeed's default {th.COLLECTIVE_TIMEOUT_S:g} s since "
    f"0.19.6, {th.COLLECTIVE_TIMEOUT_BEFORE_S:g} s before)"
)
