"""A tiny GPT-2 trained by Hugging Face's Trainer with DeepSpeed (CPU, gloo): real Trainer output.

No download: the model is built from a config, the data are random token ids. Run with
``deepspeed --num_gpus 2 train_hf.py --deepspeed ds_config.json [--steps N] [--eval_steps N]``.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepspeed", required=True)
    ap.add_argument("--local_rank", type=int, default=-1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--logging_steps", type=int, default=5)
    ap.add_argument("--eval_steps", type=int, default=20)
    ap.add_argument("--gas", type=int, default=1)
    ap.add_argument("--out", default="out")
    ap.add_argument("--disable_tqdm", action="store_true")
    ap.add_argument("--log_level", default="passive")
    ap.add_argument("--lr", type=float, default=5e-4)
    a = ap.parse_args()
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=64, vocab_size=512)
    model = GPT2LMHeadModel(cfg)
    args = TrainingArguments(
        output_dir=a.out,
        max_steps=a.steps,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=a.gas,
        learning_rate=a.lr,
        warmup_steps=5,
        logging_steps=a.logging_steps,
        eval_strategy="steps",
        eval_steps=a.eval_steps,
        save_strategy="no",
        report_to=[],
        deepspeed=a.deepspeed,
        use_cpu=True,
        disable_tqdm=a.disable_tqdm,
        dataloader_num_workers=0,
        log_level=a.log_level,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(4000, 32, 512),
        eval_dataset=Tokens(32, 32, 512),
    )
    trainer.train()


if __name__ == "__main__":
    main()
