# Right, written differently: a strided slice of the data set, two separate
# all-reduces, and the model's own module in evaluation mode.
import torch
import torch.distributed as dist


def evaluate(model, test_dataset, rank, world_size, device):
    features, labels = test_dataset[rank::world_size]
    model.module.eval()
    with torch.no_grad():
        predicted = model.module(features.to(device)).argmax(dim=1)
    model.module.train()
    right = (predicted == labels.to(device)).sum().float().reshape(1)
    images = torch.tensor([float(len(labels))], device=device)
    dist.all_reduce(right)
    dist.all_reduce(images)
    return float(right / images)
