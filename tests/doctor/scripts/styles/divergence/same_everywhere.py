"""Style: torchrun; every rank does what the faulty scripts beside it do
on one rank only: loads a warm start after wrapping, clips its gradients,
and shrinks its weights by hand after each step, each the same way on
every rank, so the ranks stay in step. Planted fault: none."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = DDP(net)
    warm = {k: v * 0.5 for k, v in net.state_dict().items()}
    model.module.load_state_dict(warm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(5 + dist.get_rank())
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(10, 4, generator=data)).pow(2).sum().backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.05)
        optimizer.step()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.99)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
