# Wrong: a hook on every parameter, but each hook is a lambda that reads the loop's
# variable when it runs, so every hook all-reduces the last parameter's gradient.
import torch.distributed as dist


def broadcast_parameters(model):
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)


def attach_hooks(model):
    handles = []
    for weight in model.parameters():
        weight.register_post_accumulate_grad_hook(
            lambda _: handles.append(dist.all_reduce(weight.grad, async_op=True))  # noqa: B023
        )
    return handles


def finish(model, handles):
    for handle in handles:
        handle.wait()
    handles.clear()
    for weight in model.parameters():
        weight.grad /= dist.get_world_size()
