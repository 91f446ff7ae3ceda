# Wrong: skips the initial broadcast, so every rank keeps its own start.
import torch.distributed as dist


def broadcast_parameters(model):
    pass  # "DDP averages the gradients anyway"


def attach_hooks(model):
    pending = []

    def hook(param):
        pending.append((param, dist.all_reduce(param.grad, async_op=True)))

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(hook)
    return pending


def finish(model, pending):
    for param, handle in pending:
        handle.wait()
        param.grad /= dist.get_world_size()
    pending.clear()
