"""``DeepSpeedEngine`` as far as the probe sees it: forward, backward, step, global_steps."""

import time

from deepspeed import comm as dist


class DeepSpeedEngine:
    def __init__(self, gas=1, fwd_s=0.0):
        self.global_steps = 0
        self.global_rank = 0
        self.device = "cpu"
        self.gas = gas
        self.fwd_s = fwd_s
        self.micro = 0

    def forward(self, x):
        time.sleep(self.fwd_s)
        return x

    def backward(self, loss):
        if (self.micro + 1) % self.gas == 0:
            dist.all_reduce(loss)
        return loss

    def step(self):
        self.micro += 1
        if self.micro % self.gas == 0:
            self.global_steps += 1
