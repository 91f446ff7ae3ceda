# Right: the reference rewritten: the counts kept apart and stacked for one all_reduce,
# torch.distributed imported as dist, a batch size of its own.
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset


def evaluate(model, test_dataset, rank, world_size, device):
    part = Subset(test_dataset, list(range(len(test_dataset)))[rank::world_size])
    hits, seen = 0, 0
    model.eval()
    with torch.no_grad():
        for images, targets in DataLoader(part, batch_size=50):
            guesses = model(images.to(device)).argmax(1)
            hits += int((guesses == targets.to(device)).sum())
            seen += targets.numel()
    model.train()
    totals = torch.tensor([hits, seen], dtype=torch.float64, device=device)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return float(totals[0] / totals[1])
