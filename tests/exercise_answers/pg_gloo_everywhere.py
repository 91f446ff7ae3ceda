# Wrong: the GPU is selected, but the group is always gloo, even with a GPU per rank.
import os

import torch
import torch.distributed as dist


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()
