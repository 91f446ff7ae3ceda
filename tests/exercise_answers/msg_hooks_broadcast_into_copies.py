# Wrong, in a style of its own: broadcast_parameters walks the state dict and broadcasts a
# clone of each entry, so rank 0's values arrive in the clones, which are then dropped; the
# model's own parameters and buffers keep the values each rank started with.
import torch.distributed as dist


def broadcast_parameters(model):
    for _name, value in model.state_dict().items():
        received = value.clone()
        dist.broadcast(received, src=0)


def attach_hooks(model):
    started = []

    def reduce_later(param):
        started.append((param, dist.all_reduce(param.grad, async_op=True)))

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(reduce_later)
    return started


def finish(model, started):
    for param, work in started:
        work.wait()
        param.grad.div_(dist.get_world_size())
    started.clear()
