"""A wrong answer that stops where the first case stops, whatever the flags say."""
import torch.distributed as dist

calls = [0]


def stop_everywhere(stop_here):
    dist.barrier()
    calls[0] += 1
    return calls[0] > 3
