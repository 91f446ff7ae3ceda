# Wrong: each rank returns the accuracy of its own part (no all_reduce).
from torch.utils.data import DataLoader, Subset


def evaluate(model, test_dataset, rank, world_size, device):
    mine = Subset(test_dataset, range(rank, len(test_dataset), world_size))
    right = images = 0
    for features, labels in DataLoader(mine, batch_size=64):
        predicted = model(features.to(device)).argmax(dim=1)
        right += (predicted == labels.to(device)).sum().item()
        images += len(labels)
    return right / images
