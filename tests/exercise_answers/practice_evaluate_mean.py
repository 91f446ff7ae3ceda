# Wrong: averages the ranks' accuracies, although the parts differ in size.
import torch
from torch.distributed import all_reduce
from torch.utils.data import DataLoader, Subset


def evaluate(model, test_dataset, rank, world_size, device):
    mine = Subset(test_dataset, range(rank, len(test_dataset), world_size))
    right = images = 0
    with torch.no_grad():
        for features, labels in DataLoader(mine, batch_size=64):
            predicted = model(features.to(device)).argmax(dim=1)
            right += (predicted == labels.to(device)).sum().item()
            images += len(labels)
    accuracy = torch.tensor([right / images], device=device)
    all_reduce(accuracy)
    return accuracy.item() / world_size
