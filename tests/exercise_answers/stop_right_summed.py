"""The reference rewritten: a sum instead of a maximum, another import style."""
import torch
import torch.distributed as dist


def stop_everywhere(stop_here, device):
    votes = torch.zeros(1, device=device)
    if stop_here:
        votes += 1
    dist.all_reduce(votes)  # how many ranks want to stop
    return bool(votes.item() > 0)
