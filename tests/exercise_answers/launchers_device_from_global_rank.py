# Wrong, in a style of its own (the environment read through os.getenv with defaults, the
# GPU picked with torch.device("cuda", n), main setting the variables one call at a time):
# ddp_setup gives a process the GPU of its global rank, so on the second node processes 2
# and 3 ask for cuda:2 and cuda:3, which that node does not have.
import os

import torch
import torch.distributed as dist


def ddp_setup():
    global_rank = int(os.getenv("RANK", "0"))
    per_node = int(os.getenv("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= per_node:
        device = torch.device("cuda", global_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


def run_rank(epochs=1):
    ddp_setup()
    dist.destroy_process_group()


def main(rank, world_size, port, epochs=1):
    for name, value in zip(
        ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
        (rank, rank, world_size, world_size, "127.0.0.1", port),
        strict=True,
    ):
        os.putenv(name, str(value))
        os.environ[name] = str(value)
    run_rank(epochs)
