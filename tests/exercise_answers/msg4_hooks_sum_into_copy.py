# Wrong: each hook sums a detached copy of the gradient; the sum stays in the copy, and
# .grad keeps this rank's own gradient, which finish() then divides.
import torch.distributed as dist


def broadcast_parameters(model):
    for tensor in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(tensor.data, 0)


def attach_hooks(model):
    started = {}

    def on_ready(param):
        copy = param.grad.detach().clone()
        started[param] = dist.all_reduce(copy, async_op=True)

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(on_ready)
    return started


def finish(model, started):
    for param, work in started.items():
        work.wait()
        param.grad.div_(dist.get_world_size())
    started.clear()
