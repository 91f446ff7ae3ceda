# Wrong: only rank 0 reads the checkpoint back; the others start again from epoch 0.
from pathlib import Path

import torch
import torch.distributed as dist


def save_checkpoint(model, optimizer, epoch, path):
    if dist.get_rank() == 0:
        torch.save([model.module.state_dict(), optimizer.state_dict(), epoch], path)
    dist.barrier()


def resume(model, optimizer, path, device):
    weights, moments, epoch = torch.load(path, map_location=device)
    model.module.load_state_dict(weights)
    optimizer.load_state_dict(moments)
    return epoch + 1


def load_checkpoint(model, optimizer, path, device):
    reader = dist.get_rank() == 0
    return resume(model, optimizer, path, device) if reader and Path(path).exists() else 0
