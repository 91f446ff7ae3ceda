# Right, written differently: rank 0 hosts a TCPStore of its own, handed to the group.
from datetime import timedelta

import torch
import torch.distributed as dist


def ddp_setup(rank, world_size, port):
    store = dist.TCPStore(
        "127.0.0.1", port, world_size, is_master=rank == 0, timeout=timedelta(seconds=30)
    )
    on_gpu = torch.cuda.is_available() and torch.cuda.device_count() >= world_size
    if on_gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if on_gpu else "gloo", store=store, rank=rank, world_size=world_size
    )


def cleanup():
    dist.destroy_process_group()
