# Wrong for this exercise: no hooks; everything is exchanged after backward.
import torch.distributed as dist


def broadcast_parameters(model):
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)


def attach_hooks(model):
    return list(model.parameters())


def finish(model, params):
    for param in params:
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()
