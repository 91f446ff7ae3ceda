# Wrong: the first rank scores the whole test set and sends its number to the others; the
# other ranks look at nothing, so nothing is divided.
import torch
import torch.distributed as dist


def evaluate(model, test_dataset, rank, world_size, device):
    score = torch.zeros((), device=device)
    if rank == 0:
        images, labels = zip(*(test_dataset[i] for i in range(len(test_dataset))), strict=True)
        with torch.no_grad():
            guesses = model(torch.stack(images).to(device)).argmax(-1)
        score += (guesses.cpu() == torch.stack(labels)).double().mean()
    dist.broadcast(score, src=0)
    return float(score)
