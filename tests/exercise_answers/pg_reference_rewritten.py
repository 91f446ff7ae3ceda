# Right: the reference rewritten: the module imported whole, the device chosen before the
# address is set, the backend named by keyword.
import datetime
import os

import torch
import torch.distributed as dist

from ddp_lesson import devices


def ddp_setup(rank, world_size, port):
    mine = devices.device_for(rank, world_size)
    if mine.type == "cuda":
        torch.cuda.set_device(mine)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=f"{port}")
    dist.init_process_group(
        backend="gloo" if mine.type == "cpu" else "nccl",
        world_size=world_size,
        rank=rank,
        timeout=datetime.timedelta(seconds=30),
    )


def cleanup():
    dist.destroy_process_group()
