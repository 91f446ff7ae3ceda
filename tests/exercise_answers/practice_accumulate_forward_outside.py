# Wrong: each backward but the last sits in no_sync(), but every forward ran outside it.
import contextlib

import torch.nn.functional as F


def accumulate_step(model, optimizer, micro_batches):
    last = len(micro_batches) - 1
    for number, (x, y) in enumerate(micro_batches):
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        with contextlib.ExitStack() as stack:
            if number != last:
                stack.enter_context(model.no_sync())
            loss.backward()
    optimizer.step()
    optimizer.zero_grad()
