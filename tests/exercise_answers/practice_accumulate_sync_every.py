# Wrong: every micro-batch's backward all-reduces (no no_sync()).
import torch.nn.functional as F


def accumulate_step(model, optimizer, micro_batches):
    for features, labels in micro_batches:
        loss = F.cross_entropy(model(features), labels)
        (loss / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
