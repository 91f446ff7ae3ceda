# Wrong: the wrapper's state dict (names start with module.), loaded back into the wrapper.
import os

import torch
from torch.distributed import barrier, get_rank


def save_checkpoint(model, optimizer, epoch, path):
    """Rank 0 saves; every rank returns once the file is complete."""
    if get_rank() == 0:  # one writer: every rank holds the same weights
        state = {"model": model.state_dict(),
                 "optimizer": optimizer.state_dict(),
                 "epoch": epoch}
        torch.save(state, path + ".partial")
        os.replace(path + ".partial", path)  # never half a file
    barrier()  # no rank goes on before the file is complete


def load_checkpoint(model, optimizer, path, device):
    """Load path on every rank, if it exists; return the next epoch."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1
