# Wrong: only rank 0 adds up the counts; the other ranks return their own part's accuracy
# without joining the all-reduce rank 0 waits in.
import torch
import torch.distributed as dist


def evaluate(model, test_dataset, rank, world_size, device):
    features, labels = test_dataset[rank::world_size]
    with torch.no_grad():
        hits = (model(features.to(device)).argmax(1) == labels.to(device)).sum()
    counts = torch.stack([hits.double(), torch.tensor(len(labels), dtype=torch.double)])
    if rank != 0:
        return float(counts[0] / counts[1])
    dist.all_reduce(counts)
    return float(counts[0] / counts[1])
