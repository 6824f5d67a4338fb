"""dsmon's per-rank probe: runs inside every rank of the user's training job.

DeepSpeed prints its timers on rank 0 only, so the log never shows which rank is slow or
where a hung job stopped. ``dsmon run`` starts the job with this folder's ``boot/`` on
``PYTHONPATH``; its ``sitecustomize`` loads this package (under the name ``dsmon_probe``) when
``DSMON_PROBE_DIR`` is set, and :func:`install` wraps ``DeepSpeedEngine.forward``, ``backward``
and ``step`` as soon as DeepSpeed's engine module is imported. Each rank then writes JSON lines
(``rank_step`` at each optimizer step, ``heartbeat`` every second) to its own file in
``DSMON_PROBE_DIR``, which the collector follows.

The package runs in the user's training environment, which may not have dsmon installed: it
imports only the standard library (torch only when the run is on CUDA, and only once the
engine already uses it) and uses relative imports, so it works under either name.
"""

from __future__ import annotations

from .patch import install

__all__ = ["install"]
