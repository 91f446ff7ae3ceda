# Wrong: wraps the model, but tells DDP not to copy rank 0's weights to the others.
import torch.nn.parallel as parallel


def wrap(model, rank, device):
    placed = model.to(device)
    options = {"device_ids": [rank]} if device.type == "cuda" else {}
    return parallel.DistributedDataParallel(placed, init_sync=False, **options)
