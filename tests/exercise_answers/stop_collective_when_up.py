"""A wrong answer for 18's exercise (see tests/test_exercise_stopping.py)."""
import torch
from torch.distributed import ReduceOp, all_reduce


def stop_everywhere(stop_here):
    if not stop_here:
        return False
    flag = torch.tensor([1.0])
    all_reduce(flag, op=ReduceOp.MAX)
    return True
