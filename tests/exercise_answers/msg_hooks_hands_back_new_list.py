# Wrong, in a style of its own: attach_hooks hands back a slice of its list, made before any
# hook has run; the hooks keep filling the original, so finish() loops over an empty list,
# waits for nothing and divides nothing.
import torch.distributed as dist


def broadcast_parameters(model):
    for tensor in (*model.parameters(), *model.buffers()):
        dist.broadcast(tensor.detach(), 0)


def attach_hooks(model):
    in_flight = []

    def on_gradient(param):
        in_flight.append((dist.all_reduce(param.grad, async_op=True), param))

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(on_gradient)
    return in_flight[:]


def finish(model, in_flight):
    size = dist.get_world_size()
    for work, param in in_flight:
        work.wait()
        param.grad /= size
    in_flight.clear()
