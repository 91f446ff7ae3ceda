# Wrong: the mean taken as half the sum, a share written in for a pair of ranks.
import torch.distributed as dist

SHARE = 0.5  # one of two ranks


def broadcast_parameters(model):
    with __import__("torch").no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t, 0)


def attach_hooks(model):
    works = {}
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(
            lambda q: works.__setitem__(q, dist.all_reduce(q.grad, async_op=True))
        )
    return works


def finish(model, works):
    while works:
        p, w = works.popitem()
        w.wait()
        p.grad.mul_(SHARE)
