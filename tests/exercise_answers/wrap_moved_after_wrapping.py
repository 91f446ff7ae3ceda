# Wrong: the wrapper is built around the model where it was made, and only then moved:
# DDP sets itself up for the device the model is on when it wraps it.
import torch.nn.parallel as parallel


def wrap(model, rank, device):
    wrapped = parallel.DistributedDataParallel(model)
    wrapped.to(device)
    return wrapped
