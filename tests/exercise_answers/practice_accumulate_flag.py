# Right, written differently: DDP's require_backward_grad_sync flag (what
# no_sync() sets), a summed loss divided by the number of images.
import torch.nn.functional as F


def accumulate_step(model, optimizer, micro_batches):
    images = sum(len(labels) for _, labels in micro_batches)
    for n, (features, labels) in enumerate(micro_batches, start=1):
        model.require_backward_grad_sync = n == len(micro_batches)
        loss = F.cross_entropy(model(features), labels, reduction="sum")
        (loss / images).backward()
    model.require_backward_grad_sync = True
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
