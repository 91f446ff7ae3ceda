# Wrong: the group is created first and the GPU selected afterwards, although the exercise
# asks for the device to be selected before the group.
import os

import torch
from torch.distributed import destroy_process_group, init_process_group


def ddp_setup():
    local, per_node = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    gpus = torch.cuda.device_count() >= per_node
    init_process_group("nccl" if gpus else "gloo")
    if not gpus:
        return torch.device("cpu")
    torch.cuda.set_device(local)
    return torch.device(f"cuda:{local}")


def run_rank(epochs=1):
    ddp_setup()
    destroy_process_group()


def main(rank, world_size, port, epochs=1):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    run_rank(epochs)
