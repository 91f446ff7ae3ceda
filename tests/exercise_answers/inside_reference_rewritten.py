# Right: the reference rewritten: the functions imported by name, the buffers broadcast
# before the parameters, each hook bound to its parameter through a default argument.
from torch.distributed import all_reduce, broadcast, get_world_size


def broadcast_parameters(model):
    for shared in [*model.buffers(), *model.parameters()]:
        broadcast(shared.detach(), src=0)


def attach_hooks(model):
    started = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(
            lambda ready, p=p: started.append((p, all_reduce(ready.grad, async_op=True)))
        )
    return started


def finish(model, started):
    ranks = get_world_size()
    while started:
        p, work = started.pop()
        work.wait()
        p.grad /= ranks
