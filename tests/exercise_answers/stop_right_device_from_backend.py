"""Right, in the style of a function that is not handed the device: it asks the group."""
import torch
from torch.distributed import ReduceOp, all_reduce, get_backend


def where_collectives_run():
    if get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def stop_everywhere(stop_here):
    verdict = torch.tensor(float(stop_here)).to(where_collectives_run())
    all_reduce(verdict, op=ReduceOp.MAX)
    return verdict.item() > 0.5
