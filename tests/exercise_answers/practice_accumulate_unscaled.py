# Wrong: no_sync() is right, but the losses are not divided by their number.
from contextlib import nullcontext

import torch.nn.functional as F


def accumulate_step(model, optimizer, micro_batches):
    for i, (features, labels) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with nullcontext() if last else model.no_sync():
            F.cross_entropy(model(features), labels).backward()
    optimizer.step()
    optimizer.zero_grad()
