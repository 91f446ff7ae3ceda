# Wrong: a DistributedSampler for the test set, which pads the parts.
import torch
from torch.distributed import all_reduce
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def evaluate(model, test_dataset, rank, world_size, device):
    loader = DataLoader(
        test_dataset, batch_size=64, sampler=DistributedSampler(test_dataset, shuffle=False)
    )
    counts = torch.zeros(2, device=device)
    with torch.no_grad():
        for features, labels in loader:
            predicted = model(features.to(device)).argmax(dim=1)
            counts[0] += (predicted == labels.to(device)).sum()
            counts[1] += len(labels)
    all_reduce(counts)
    return (counts[0] / counts[1]).item()
