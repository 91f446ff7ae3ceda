# Wrong: the file stores the epoch to run next, and loading adds one again, so the
# resumed run starts one epoch late.
import os

import torch
import torch.distributed as dist


def save_checkpoint(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save(
            {"net": model.module.state_dict(), "optim": optimizer.state_dict(), "epoch": epoch + 1},
            path,
        )
    dist.barrier()


def load_checkpoint(model, optimizer, path, device):
    if not os.path.isfile(path):
        return 0
    state = torch.load(path, map_location=device)
    model.module.load_state_dict(state["net"])
    optimizer.load_state_dict(state["optim"])
    return state["epoch"] + 1
