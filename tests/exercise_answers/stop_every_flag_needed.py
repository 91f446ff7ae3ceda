"""A wrong answer for 18's exercise (see tests/test_exercise_stopping.py)."""
import torch
from torch.distributed import ReduceOp, all_reduce


def stop_everywhere(stop_here):
    flag = torch.tensor([1.0 if stop_here else 0.0])
    all_reduce(flag, op=ReduceOp.MIN)
    return flag.item() == 1.0
