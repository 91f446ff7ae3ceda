# Wrong: builds the DDP wrapper, then hands back the bare model inside it.
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank, device):
    model = model.to(device)
    ids = [rank] if device.type == "cuda" else None
    DDP(model, device_ids=ids)  # the wrapper is made, and thrown away
    return model
