# Wrong: copies the tutorial's fixed port instead of the one it is given.
import os

from torch.distributed import destroy_process_group, init_process_group


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    destroy_process_group()
