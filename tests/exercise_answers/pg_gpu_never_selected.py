# Wrong: NCCL when there are GPUs enough, but no GPU is ever selected, so every rank's
# calls that name no device land on cuda:0.
import os

import torch.cuda
import torch.distributed as dist


def ddp_setup(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=f"{port}")
    gpus = torch.cuda.device_count()
    dist.init_process_group("nccl" if gpus >= world_size else "gloo", rank=rank,
                            world_size=world_size)


def cleanup():
    dist.destroy_process_group()
