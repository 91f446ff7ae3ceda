# Right, written differently: select the rank's GPU, then .cuda() goes there.
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, rank, device):
    if device.type == "cuda":
        torch.cuda.set_device(device)
        model.cuda()
        return DDP(model, device_ids=[device])
    return DDP(model.cpu())
