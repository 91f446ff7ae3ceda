"""A wrong answer for 18's exercise (see tests/test_exercise_stopping.py)."""
import torch
import torch.distributed as dist


def stop_everywhere(stop_here):
    flag = torch.tensor([int(stop_here)])
    dist.broadcast(flag, src=0)
    return bool(flag)
