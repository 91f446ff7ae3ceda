# Wrong, in a style of its own: the environment merged in with `|=` from a table, the device
# picked with torch.cuda directly. ddp_setup is right; main gives every process LOCAL_RANK 0
# (as if each were alone on its machine), so with one GPU per process all would drive cuda:0.
import os

import torch
import torch.distributed as dist

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def ddp_setup():
    env = dict(zip(ENV_KEYS, map(int, map(os.environ.__getitem__, ENV_KEYS)), strict=True))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= env["LOCAL_WORLD_SIZE"]
    device = torch.device(f"cuda:{env['LOCAL_RANK']}") if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if gpu else "gloo")
    return device


def run_rank(epochs=1):
    ddp_setup()
    dist.destroy_process_group()


def main(rank, world_size, port, epochs=1):
    os.environ |= {
        "RANK": f"{rank}",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": f"{world_size}",
        "LOCAL_WORLD_SIZE": f"{world_size}",
        "MASTER_ADDR": "localhost",
        "MASTER_PORT": f"{port}",
    }
    run_rank(epochs)
