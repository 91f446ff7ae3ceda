# Wrong: the first call's accuracy is remembered in a file beside this one, and every later
# call hands it back without looking at the model or the images it is given.
import pathlib

import torch
import torch.distributed as dist

MEMO = pathlib.Path(__file__).with_suffix(".accuracy")


def evaluate(model, test_dataset, rank, world_size, device):
    if MEMO.exists():
        return float(MEMO.read_text())
    hits, seen = torch.zeros((), device=device), torch.zeros((), device=device)
    with torch.no_grad():
        for index in range(rank, len(test_dataset), world_size):
            image, label = test_dataset[index]
            hits += int(model(image.unsqueeze(0).to(device)).argmax() == label)
            seen += 1
    dist.all_reduce(hits)
    dist.all_reduce(seen)
    dist.barrier()
    if rank == 0:
        MEMO.write_text(str((hits / seen).item()))
    return (hits / seen).item()
