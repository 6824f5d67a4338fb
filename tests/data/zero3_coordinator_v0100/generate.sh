#!/usr/bin/env bash
# generate.sh -- make train.log here: DeepSpeed 0.10.0, ZeRO-3, wall_clock_breakdown, on CPU.
#
# 0.10.0 is the only release whose ZeRO-3 parameter coordinator prints its eight timers
# (later releases build the profiler with timers=None). The model and training loop are the
# corpus script ds-cpu/scripts/train.py (the shared folder beside the clone); cpu_shim.py makes
# 0.10.0's CPU accelerator usable without intel_extension_for_pytorch / oneCCL (see its docstring).
#
# Needs: a python3.11 venv with numpy<2 and pydantic<2, torch 2.13.0+cpu importable, the
# deepspeed-0.10.0 sdist unpacked (no install: DS_BUILD_OPS is irrelevant, no op is built),
# and numactl on PATH (0.10.0's CPU accelerator counts NUMA nodes with it).
#   PY=/path/venv/bin/python DS_SRC=/path/deepspeed-0.10.0 bash generate.sh
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TRAIN=${TRAIN:-$HERE/../../../../shared/corpus/ds-cpu/scripts/train.py}
cd "$HERE"
PYTHONPATH="$DS_SRC" timeout 240 "$PY" -m torch.distributed.run --nproc_per_node 2 \
  --master_port 29719 cpu_shim.py "$TRAIN" --deepspeed_config ds_config.json --steps 8 \
  > train.log 2>&1
# The same run with the allocator retry count staged (see cpu_shim.py): ZeRO-3's step() prints
# its cache-flush warning, which a CPU run cannot trigger for real. Written to its own folder.
DSMON_ALLOC_RETRIES_PER_CALL=3 PYTHONPATH="$DS_SRC" timeout 240 "$PY" -m torch.distributed.run \
  --nproc_per_node 2 --master_port 29720 cpu_shim.py "$TRAIN" --deepspeed_config ds_config.json \
  --steps 4 > ../zero3_flush_warning_v0100/train.log 2>&1
