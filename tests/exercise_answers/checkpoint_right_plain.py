# Right, written differently: torch.distributed as dist, no temporary file, the device
# given as a string, the epoch stored under its own name.
from pathlib import Path

import torch
import torch.distributed as dist


def save_checkpoint(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save(
            {"weights": model.module.state_dict(), "opt": optimizer.state_dict(), "done": epoch},
            path,
        )
    dist.barrier()


def load_checkpoint(model, optimizer, path, device):
    if not Path(path).is_file():
        return 0
    saved = torch.load(path, map_location=str(device), weights_only=True)
    model.module.load_state_dict(saved["weights"])
    optimizer.load_state_dict(saved["opt"])
    return saved["done"] + 1
