"""train.py with DeepSpeed's fp16 check of the CPU accelerator answered yes.

DeepSpeed refuses fp16 on a CPU whose oneDNN has no fp16 kernels ("Type fp16 is not
supported on your device"); torch still computes in fp16 there, only slowly. Everything else,
DeepSpeed's fp16 optimizer and its dynamic loss scaler included, runs unchanged.
"""

import runpy
import sys
from pathlib import Path

from deepspeed.accelerator import get_accelerator

get_accelerator().is_fp16_supported = lambda: True
sys.argv[0] = str(Path(__file__).with_name("train.py"))
runpy.run_path(sys.argv[0], run_name="__main__")
