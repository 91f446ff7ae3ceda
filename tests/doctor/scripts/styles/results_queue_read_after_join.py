"""Each rank sends its trained weights home on a queue; the parent joins the ranks first.

The weights (a 256x256 layer) are more than a pipe holds, so each rank's
process waits at its exit for the parent to read them, while the parent
waits in join() for the processes to end.
"""

import multiprocessing

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def rank_main(rank, world_size, outbox):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29838",
                            rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(256, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 256)).square().mean().backward()
        opt.step()
    dist.destroy_process_group()
    weights = model.module.weight.detach().numpy().copy()
    outbox.put((rank, weights))  # planted: teardown


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    outbox = context.Queue()
    ranks = [context.Process(target=rank_main, args=(r, 2, outbox)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    results = dict(outbox.get() for _ in ranks)
    print({rank: float(w.sum()) for rank, w in sorted(results.items())})
