# Wrong: every rank adds its own rank to the port, so rank 1 looks for rank 0 at a port
# nobody serves; rank 0 waits in init_process_group (a short timeout, to end soon).
import datetime
import os

import torch.distributed as dist


def ddp_setup(rank, world_size, port):
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=f"{port + rank}")
    dist.init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=5)
    )


def cleanup():
    dist.destroy_process_group()
