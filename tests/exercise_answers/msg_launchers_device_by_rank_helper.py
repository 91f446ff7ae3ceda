# Wrong, in a style of its own: a helper numbers the GPU with RANK, the global rank, and the
# course's device_for refuses a number that is not below the node's LOCAL_WORLD_SIZE; the
# group itself is joined right (init_process_group reads the environment).
import os

import torch
import torch.distributed as dist

from ddp_lesson.devices import device_for


def _which_gpu():
    return int(os.environ["RANK"])


def ddp_setup():
    device = device_for(_which_gpu(), int(os.environ["LOCAL_WORLD_SIZE"]))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def run_rank(epochs=1):
    ddp_setup()
    dist.destroy_process_group()


def main(rank, world_size, port, epochs=1):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    for key, value in {"RANK": rank, "LOCAL_RANK": rank}.items():
        os.environ[key] = str(value)
    for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        os.environ[key] = str(world_size)
    run_rank(epochs)
