# Wrong: the model's gradients are cleared before every micro-batch, so only the last
# micro-batch's gradient is left when the optimiser steps.
import torch.nn.functional as F


def accumulate_step(model, optimizer, micro_batches):
    last = len(micro_batches) - 1
    for i, (features, labels) in enumerate(micro_batches):
        model.zero_grad(set_to_none=True)
        model.require_backward_grad_sync = i == last
        loss = F.cross_entropy(model(features), labels) / len(micro_batches)
        loss.backward()
    model.require_backward_grad_sync = True
    optimizer.step()
