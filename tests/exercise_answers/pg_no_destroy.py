# Wrong: connects correctly but never releases the group.
import os

from torch.distributed import init_process_group


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    pass
