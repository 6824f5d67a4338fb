"""A training loop on the stand-in DeepSpeed (``fake_deepspeed/``): the probe without torch.

``python train_fake.py STEPS GAS FWD_S`` makes STEPS optimizer steps of GAS micro-batches,
each forward taking FWD_S seconds, and prints one line per step.
"""

import sys

from deepspeed.runtime.engine import DeepSpeedEngine

steps, gas, fwd_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
engine = DeepSpeedEngine(gas=gas, fwd_s=fwd_s)
for _ in range(steps * gas):
    loss = engine.forward(1.0)
    engine.backward(loss)
    engine.step()
print(f"trained {engine.global_steps} steps", flush=True)
