# Right: the reference rewritten: the last micro-batch handled after the loop, the loss
# function from torch.nn, the gradients cleared before the step's first backward.
from torch import nn


def accumulate_step(model, optimizer, micro_batches):
    criterion = nn.CrossEntropyLoss()
    *quiet, final = micro_batches
    count = len(micro_batches)
    optimizer.zero_grad()
    with model.no_sync():
        for x, y in quiet:
            (criterion(model(x), y) / count).backward()
    x, y = final
    (criterion(model(x), y) / count).backward()
    optimizer.step()
