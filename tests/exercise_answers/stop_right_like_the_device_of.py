"""Right: the flag made beside a tensor already on the device, then arithmetic on it."""
import torch
import torch.distributed as dist


def stop_everywhere(stop_here, device):
    anchor = torch.empty(0, device=device)
    flag = torch.ones(1, device=anchor.device) * int(stop_here)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.int().item())
