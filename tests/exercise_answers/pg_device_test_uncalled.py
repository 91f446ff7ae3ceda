# Wrong: the GPU branch is chosen by naming torch.cuda.is_available without calling it,
# so every machine takes it, one without GPUs too.
import os

import torch
import torch.distributed as dist

LOOPBACK = "127.0.0.1"


def ddp_setup(rank, world_size, port):
    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=f"{port}")
    if torch.cuda.is_available:
        torch.cuda.set_device(rank)
        backend = dist.Backend.NCCL
    else:
        backend = dist.Backend.GLOO
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def cleanup():
    if dist.is_initialized():
        dist.destroy_process_group()
