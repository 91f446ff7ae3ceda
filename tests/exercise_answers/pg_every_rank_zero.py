# Wrong: every process claims to be rank 0.
import os
from datetime import timedelta

from torch.distributed import destroy_process_group, init_process_group


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group("gloo", rank=0, world_size=world_size, timeout=timedelta(seconds=3))


def cleanup():
    destroy_process_group()
