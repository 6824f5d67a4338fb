"""A small model trained with DeepSpeed, for dsmon's end-to-end tests (CPU accelerator works).

Run by DeepSpeed's launcher exactly as a user's script is:
``deepspeed --num_gpus 2 train_tiny.py --deepspeed_config ds_config.json --steps 300``.
It prints nothing of its own but ``[train_tiny] step N`` after each optimizer step, so every
other line of the log is DeepSpeed's. ``--sleep`` paces the steps so that a test can look at
the dashboard while training is still going. ``--slow-rank R --slow-s S`` makes rank R's
model sleep S seconds in every forward, as a rank with a slow GPU or input pipeline would.
"""

import argparse
import os
import time

import deepspeed
import torch
from torch import nn


class Sleepy(nn.Module):
    """A layer whose forward waits ``seconds``: a straggler on purpose."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--local_rank", type=int, default=0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each step")
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank whose forward sleeps")
    p.add_argument("--slow-s", type=float, default=0.0, help="its sleep per forward (s)")
    p = deepspeed.add_config_arguments(p)
    args = p.parse_args()
    torch.manual_seed(0)
    layers = [nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)]
    if args.slow_rank == int(os.environ.get("RANK", "0")):
        layers.append(Sleepy(args.slow_s))
    model = nn.Sequential(*layers)
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters()
    )
    batch = engine.train_micro_batch_size_per_gpu()
    gen = torch.Generator().manual_seed(1 + engine.global_rank)
    for step in range(1, args.steps + 1):
        x = torch.randn(batch, 64, generator=gen).to(engine.device)
        loss = (engine(x) - x).pow(2).mean()
        engine.backward(loss)
        engine.step()
        if engine.global_rank == 0:
            print(f"[train_tiny] step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.sleep)


if __name__ == "__main__":
    main()
