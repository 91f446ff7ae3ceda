"""What `13_evaluation` measures in `workers/real_batchnorm.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch
import torch.distributed as dist

from ddp_lesson.data import digits
from ddp_lesson.reports import send_report


def report(rank, device, model, trained, accuracy):
    bn = model.module[1]  # the BatchNorm layer
    send_report(rank, trained=trained.cpu(), accuracy=accuracy,
                evaluated=bn.running_mean.cpu(), sync=stats(rank, device))


def stats(rank, device):
    """What SyncBatchNorm would exchange for one batch, done by hand."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 128).to(device)
    features, _ = digits("train")[rank * 32:(rank + 1) * 32]
    with torch.no_grad():
        x = layer(features.to(device))  # what the BatchNorm layer sees
    mean, var = x.mean(dim=0), x.var(dim=0, unbiased=False)
    count = torch.tensor([float(len(x))], device=device)
    mine = torch.cat([mean, var, count])  # 2C + 1 floats from this rank
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    c = len(mean)
    means = torch.stack([g[:c] for g in gathered])
    variances = torch.stack([g[c:2 * c] for g in gathered])
    counts = torch.stack([g[2 * c:] for g in gathered])
    n = counts.sum()
    combined = (counts * means).sum(dim=0) / n
    spread = (counts * (variances + (means - combined) ** 2)).sum(dim=0) / n
    everything = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(everything, x)  # the whole global batch, to compare
    whole = torch.cat(everything)
    return {"floats_sent": mine.numel(), "channels": c,
            "local_vs_global": (mean - whole.mean(dim=0)).abs().max().item(),
            "mean_error": (combined - whole.mean(dim=0)).abs().max().item(),
            "var_error": (spread - whole.var(dim=0, unbiased=False)
                          ).abs().max().item()}
