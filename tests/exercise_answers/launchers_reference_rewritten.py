# Right: the reference rewritten: torch.distributed imported whole, the environment read
# into names first, main setting the variables one by one in another order.
import datetime
import os

import torch
import torch.distributed as dist

from ddp_lesson import devices


def ddp_setup():
    per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    here = int(os.environ["LOCAL_RANK"])
    chosen = devices.device_for(here, per_node)
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
    dist.init_process_group(
        "nccl" if chosen.type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=30)
    )
    return chosen


def run_rank(epochs=1):
    ddp_setup()
    try:
        pass
    finally:
        dist.destroy_process_group()


def main(rank, world_size, port, epochs=1):
    for name, value in (
        ("MASTER_PORT", port),
        ("MASTER_ADDR", "127.0.0.1"),
        ("LOCAL_WORLD_SIZE", world_size),
        ("WORLD_SIZE", world_size),
        ("LOCAL_RANK", rank),
        ("RANK", rank),
    ):
        os.environ[name] = str(value)
    run_rank(epochs)
