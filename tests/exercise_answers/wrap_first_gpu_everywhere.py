# Wrong: .cuda() with no GPU selected sends every rank's model to cuda:0.
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank, device):
    if device.type != "cuda":
        return DDP(model.to(device))
    return DDP(model.cuda(), device_ids=[rank])
