"""Style: a GPU script that reports on its hardware as it trains: the device's name and
memory, CUDA events around each epoch, a side stream for the copies, the model built
inside `with torch.cuda.device(rank)`, and the CUDA random state kept in its checkpoint;
one process per GPU, started by hand. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def describe(rank):
    info = torch.cuda.get_device_properties(rank)
    free, total = torch.cuda.mem_get_info()
    name = torch.cuda.get_device_name(rank)
    return f"{name}: {info.total_memory >> 20} MiB, {free >> 20} MiB free of {total >> 20}"


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29806")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    print(f"rank {rank} on {describe(rank)}")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 5), torch.randn(96, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=12, sampler=sampler, pin_memory=True)
    with torch.cuda.device(rank):
        model = DDP(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1)).cuda(),
                    device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    copies = torch.cuda.Stream()
    torch.cuda.reset_peak_memory_stats()
    for epoch in range(2):
        sampler.set_epoch(epoch)
        began, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began.record()
        for x, y in loader:
            with torch.cuda.stream(copies):
                x, y = x.pin_memory().cuda(non_blocking=True), y.cuda(non_blocking=True)
            torch.cuda.current_stream().wait_stream(copies)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        ended.record()
        torch.cuda.synchronize()
        if rank == 0:
            print(f"epoch {epoch}: {began.elapsed_time(ended):.1f} ms")
    if rank == 0:
        kept = {"weights": model.module.state_dict(), "cuda_rng": torch.cuda.get_rng_state()}
        print("checkpoint holds", sorted(kept))
    dist.destroy_process_group()


if __name__ == "__main__":
    gpus = torch.cuda.device_count()
    context = mp.get_context("spawn")
    ranks = [context.Process(target=train, args=(rank, gpus)) for rank in range(gpus)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
