"""A right answer in another style: every rank's flag gathered, then any()."""
import torch.distributed as dist


def stop_everywhere(stop_here):
    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, bool(stop_here))
    return any(flags)
