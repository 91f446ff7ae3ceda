# Wrong: the `if rank == 0` is missing, so every rank writes the same file.
import os

import torch
from torch.distributed import barrier


def save_checkpoint(model, optimizer, epoch, path):
    """Rank 0 saves; every rank returns once the file is complete."""
    state = {"model": model.module.state_dict(),
             "optimizer": optimizer.state_dict(),
             "epoch": epoch}
    torch.save(state, path)
    barrier()  # no rank goes on before the file is complete


def load_checkpoint(model, optimizer, path, device):
    """Load path on every rank, if it exists; return the next epoch."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=device)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1
