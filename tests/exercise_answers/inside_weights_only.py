# Wrong: hooks only the weights (tensors with two dimensions), not the biases.
import torch.distributed as dist


def broadcast_parameters(model):
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)


def attach_hooks(model):
    pending = []

    def hook(param):
        pending.append((param, dist.all_reduce(param.grad, async_op=True)))

    for param in model.parameters():
        if param.dim() == 2:
            param.register_post_accumulate_grad_hook(hook)
    return pending


def finish(model, pending):
    for param, handle in pending:
        handle.wait()
        param.grad /= dist.get_world_size()
    pending.clear()
