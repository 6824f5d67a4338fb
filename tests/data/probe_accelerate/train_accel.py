"""A custom training loop on Accelerate's DeepSpeed plugin: the config is built in code.

No config file exists: the dict below is all DeepSpeed gets (Accelerate adds its own keys).
"""

import argparse
import time

import torch
from accelerate import Accelerator, DeepSpeedPlugin


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--zero_stage", type=int, default=2)
    p.add_argument("--gas", type=int, default=1)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each step")
    p.add_argument("--log_level", default="", help="DeepSpeed's log_level key, when given")
    args = p.parse_args()
    ds_config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": args.gas,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": args.zero_stage, "overlap_comm": False},
    }
    if args.log_level:
        ds_config["log_level"] = args.log_level
    plugin = DeepSpeedPlugin(hf_ds_config=ds_config)
    acc = Accelerator(deepspeed_plugin=plugin)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 8, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, opt, loader = acc.prepare(model, opt, loader)
    step = 0
    for x, y in loader:
        with acc.accumulate(model):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
        if acc.sync_gradients:
            step += 1
            acc.print(f"step {step} loss {loss.item():.4f}")
            time.sleep(args.sleep)
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
