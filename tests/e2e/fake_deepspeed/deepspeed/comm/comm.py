"""``deepspeed.comm.comm``: one blocking collective that takes ``ALL_REDUCE_S`` seconds."""

import time

ALL_REDUCE_S = 0.01


def all_reduce(tensor, op=None, group=None, async_op=False):
    time.sleep(ALL_REDUCE_S)
    return tensor
