# Wrong: the meeting point is written into the code (tcp://...:29517 under mp.spawn), not
# the port main is given; torchrun's variables are read for everything else.
import os

import torch
import torch.distributed as dist

MEETING = "tcp://127.0.0.1:29517"


def ddp_setup():
    local = int(os.environ["LOCAL_RANK"])
    on_gpu = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    device = torch.device(f"cuda:{local}") if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    how = os.environ.get("MEETING", "env://")
    dist.init_process_group(
        "nccl" if on_gpu else "gloo",
        init_method=how,
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )
    return device


def run_rank(epochs=1):
    ddp_setup()
    dist.destroy_process_group()


def main(rank, world_size, port, epochs=1):
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size), MEETING=MEETING,
    )
    run_rank(epochs)
