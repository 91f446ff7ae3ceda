# Wrong: the counts are summed over the ranks, but only rank 0 hands the accuracy back;
# the other ranks fall off the end of the function and return None.
import torch
import torch.distributed as dist


def evaluate(model, test_dataset, rank, world_size, device):
    features, labels = test_dataset[rank::world_size]
    with torch.no_grad():
        guesses = model(features.to(device)).argmax(1)
    counts = torch.tensor(
        [float((guesses == labels.to(device)).sum()), float(len(labels))], device=device
    )
    dist.all_reduce(counts)
    if rank == 0:
        return (counts[0] / counts[1]).item()
