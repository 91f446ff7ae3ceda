# Wrong: the device follows the local rank, but counts the GPUs against the whole world.
import os
from datetime import timedelta

import torch
from torch.distributed import destroy_process_group, get_rank, init_process_group

from ddp_lesson.devices import device_for


def ddp_setup():
    local = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device = device_for(local, world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    init_process_group(backend, timeout=timedelta(seconds=30))
    return device


def run_rank(epochs=1):
    ddp_setup()
    print("rank", get_rank(), "would train for", epochs, "epoch(s)")
    destroy_process_group()


def main(rank, world_size, port, epochs=1):
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    run_rank(epochs)
