"""Style: torchrun; a helper builds the model and its optimiser, and the
training code then wraps a second model from the same helper, so the
optimiser steps parameters DDP never uses and the wrapped model never
trains. Planted fault: model_wrapping (the step of the other model's optimiser)."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def main():
    dist.init_process_group("gloo")
    _, optimizer = build()
    model = DDP(build()[0])
    data = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(3):
        x = torch.randn(8, 3, generator=data)
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()  # planted: model_wrapping
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
