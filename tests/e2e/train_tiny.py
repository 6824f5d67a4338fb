"""A small model trained with DeepSpeed, for dsmon's end-to-end tests (CPU accelerator works).

Run by DeepSpeed's launcher exactly as a user's script is:
``deepspeed --num_gpus 2 train_tiny.py --deepspeed_config ds_config.json --steps 300``.
It prints nothing of its own but ``[train_tiny] step N loss L`` after each optimizer step, so
every other line of the log is DeepSpeed's. ``--pace-s`` paces the steps inside the model (every
rank's forward takes that long, as a bigger model's compute would), so that a test can look at the
dashboard while training is still going; ``--sleep`` waits after each step instead, in the
training loop, outside DeepSpeed: time the probe sees before the next forward, as a data loader's.

Faults a real job meets, each on purpose and on one rank (``tests/scenarios.py`` names them):

- ``--slow-rank R --slow-s S``: rank R's model sleeps S seconds in every forward, as a rank with
  a slow GPU would;
- ``--stop-rank R --stop-step N``: rank R stops itself (SIGSTOP) after step N, as a process
  stuck in a driver call does: alive, silent, its peers waiting in the next collective;
- ``--die-rank R --die-step N --die-signal KILL``: rank R is killed by that signal after step
  N, as the kernel's OOM killer or a node's agent does; with ``--die-once`` only in torchrun's
  first attempt (``TORCHELASTIC_RESTART_COUNT`` 0), so a job with ``--max-restarts`` goes on;
- ``--start-delay S``: every rank waits S seconds, silently, between ``deepspeed.initialize``
  and its first step, as a job that compiles or loads data before training does;
- ``--loss-factor F``: the loss is multiplied by F, which overflows fp16 (the loss scaler then
  skips steps and lowers its scale);
- ``--slow-data-rank R --slow-data-s S``: rank R's data loader takes S seconds for every batch,
  as a rank whose input pipeline cannot keep up does: its engine phases are as fast as the
  others', the time goes before each forward.

``--client-optimizer`` passes a torch AdamW to ``deepspeed.initialize``, for a config that
names no optimizer (DeepSpeed's defaults).
"""

import argparse
import os
import signal
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
    # DeepSpeed's launcher passes --local_rank; torchrun sets LOCAL_RANK only
    p.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", "0")))
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each step")
    p.add_argument("--pace-s", type=float, default=0.0, help="every rank's forward takes it (s)")
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank whose forward sleeps")
    p.add_argument("--slow-s", type=float, default=0.0, help="its sleep per forward (s)")
    p.add_argument("--stop-rank", type=int, default=-1, help="the rank that stops (SIGSTOP)")
    p.add_argument("--stop-step", type=int, default=0, help="after this step")
    p.add_argument("--die-rank", type=int, default=-1, help="the rank that is killed")
    p.add_argument("--die-step", type=int, default=0, help="after this step")
    p.add_argument("--die-signal", default="KILL", help="by this signal (KILL, TERM, ...)")
    p.add_argument("--die-once", action="store_true", help="only in torchrun's first attempt")
    p.add_argument("--start-delay", type=float, default=0.0, help="silent seconds before step 1")
    p.add_argument("--loss-factor", type=float, default=1.0, help="the loss is multiplied by it")
    p.add_argument("--client-optimizer", action="store_true", help="AdamW made here, not by DS")
    p.add_argument("--slow-data-rank", type=int, default=-1, help="the rank whose loader lags")
    p.add_argument("--slow-data-s", type=float, default=0.0, help="its time per batch (s)")
    p = deepspeed.add_config_arguments(p)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    layers = [nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)]
    if args.pace_s:
        layers.append(Sleepy(args.pace_s))
    if args.slow_rank == rank:
        layers.append(Sleepy(args.slow_s))
    model = nn.Sequential(*layers)
    client = torch.optim.AdamW(model.parameters(), lr=1e-3) if args.client_optimizer else None
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), optimizer=client
    )
    batch = engine.train_micro_batch_size_per_gpu()
    gen = torch.Generator().manual_seed(1 + engine.global_rank)
    time.sleep(args.start_delay)
    dtype = next(engine.module.parameters()).dtype
    data_s = args.slow_data_s if rank == args.slow_data_rank else 0.0
    for step in range(1, args.steps + 1):
        time.sleep(data_s)  # the data loader's share of the step
        x = torch.randn(batch, 64, generator=gen).to(engine.device, dtype)
        loss = (engine(x) - x).float().pow(2).mean() * args.loss_factor
        engine.backward(loss)
        engine.step()
        if engine.global_rank == 0:
            print(f"[train_tiny] step {step} loss {loss.item():.4f}", flush=True)
        if rank == args.stop_rank and step == args.stop_step:
            os.kill(os.getpid(), signal.SIGSTOP)
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if rank == args.die_rank and step == args.die_step and (first_attempt or not args.die_once):
            os.kill(os.getpid(), getattr(signal, f"SIG{args.die_signal}"))
        time.sleep(args.sleep)


if __name__ == "__main__":
    main()
