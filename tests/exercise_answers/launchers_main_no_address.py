# Wrong: main sets every variable torchrun would, but MASTER_ADDR, so init_process_group
# has no address to meet at.
import os

import torch
import torch.distributed as dist


def ddp_setup():
    env = {k: int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    if torch.cuda.device_count() >= env["LOCAL_WORLD_SIZE"]:
        device, backend = torch.device("cuda", env["LOCAL_RANK"]), "nccl"
        torch.cuda.set_device(env["LOCAL_RANK"])
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend=backend, init_method="env://", rank=env["RANK"], world_size=env["WORLD_SIZE"]
    )
    return device


def run_rank(epochs=1):
    ddp_setup()
    dist.destroy_process_group()


def main(rank, world_size, port, epochs=1):
    numbers = dict(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=world_size)
    numbers.update(LOCAL_WORLD_SIZE=world_size, MASTER_PORT=port)
    os.environ.update({key: f"{value}" for key, value in numbers.items()})
    run_rank(epochs)
