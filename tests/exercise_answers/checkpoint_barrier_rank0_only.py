# Wrong: the ranks other than 0 return before the barrier, so rank 0 waits there alone.
import os

import torch
import torch.distributed as dist


def save_checkpoint(model, optimizer, epoch, path):
    if dist.get_rank() != 0:
        return
    state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save({**state, "epoch": epoch}, path)
    dist.barrier()


def load_checkpoint(model, optimizer, path, device):
    if not os.path.isfile(path):
        return 0
    state = torch.load(path, map_location=device)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1
