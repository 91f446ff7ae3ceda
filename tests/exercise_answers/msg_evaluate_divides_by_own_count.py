# Wrong, in a style of its own: contiguous chunks from tensor_split, the right answers summed
# over all ranks with one all_reduce, but divided by the number of images in this rank's own
# chunk: the accuracy comes out about world_size times too large.
import torch
import torch.distributed as dist


def evaluate(model, test_dataset, rank, world_size, device):
    indices = torch.tensor_split(torch.arange(len(test_dataset)), world_size)[rank]
    features, labels = test_dataset[indices]
    model.eval()
    with torch.no_grad():
        guesses = model(features.to(device)).argmax(dim=1)
    model.train()
    right = (guesses == labels.to(device)).sum().to(torch.float64)
    dist.all_reduce(right)
    return right.item() / len(indices)
