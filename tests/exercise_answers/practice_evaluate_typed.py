# Wrong: each rank evaluates its own part, but the accuracy returned is a number written in
# from an earlier run, not computed from what the ranks counted.
import torch


def evaluate(model, test_dataset, rank, world_size, device):
    with torch.no_grad():
        for index in range(rank, len(test_dataset), world_size):
            image, _ = test_dataset[index]
            model(image.unsqueeze(0).to(device))
    return 0.8412
