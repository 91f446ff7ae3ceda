# Wrong: every rank takes the whole test set out of its tensors and evaluates all of it;
# the ranks agree only because each did all the work, and nothing is exchanged.
import torch


def evaluate(model, test_dataset, rank, world_size, device):
    images, targets = test_dataset.tensors
    with torch.no_grad():
        guesses = model(images.to(device)).argmax(1).cpu()
    return (guesses == targets).float().mean().item()
