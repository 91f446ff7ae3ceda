# Wrong: NCCL and the rank's GPU as soon as the machine has any GPU; with fewer GPUs than
# ranks some rank selects a GPU that does not exist.
import os

import torch
import torch.distributed as dist

GPU = torch.cuda.is_available


def ddp_setup(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = dist.Backend.NCCL if GPU() else dist.Backend.GLOO
    if backend == dist.Backend.NCCL:
        torch.cuda.set_device(torch.device("cuda", rank))
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()
