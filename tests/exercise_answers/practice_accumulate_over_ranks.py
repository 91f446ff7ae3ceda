# Wrong: each loss is divided by the number of ranks as well as by the number of
# micro-batches, although DDP's all-reduce already averages over the ranks.
from contextlib import ExitStack

import torch.distributed as dist
import torch.nn.functional as F


def accumulate_step(model, optimizer, micro_batches):
    parts = len(micro_batches) * dist.get_world_size()
    for i, (features, labels) in enumerate(micro_batches, start=1):
        with ExitStack() as stack:
            if i < len(micro_batches):
                stack.enter_context(model.no_sync())
            F.cross_entropy(model(features), labels).div(parts).backward()
    optimizer.step()
    optimizer.zero_grad()
