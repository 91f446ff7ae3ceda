"""Style: torchrun; gradients are clipped on rank 0 only (a logging branch
that grew), so after the first step rank 0's weights move less than the
others'. Planted fault: model_wrapping (the clip on one rank)."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    data = torch.Generator().manual_seed(10 + rank)
    for step in range(3):
        x = torch.randn(16, 4, generator=data) * 5
        optimizer.zero_grad()
        loss = (model(x) - 3).pow(2).mean()
        loss.backward()
        if rank == 0:
            norm = nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # planted: model_wrapping
            print(f"step {step} grad norm {float(norm):.3f}")
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
