"""Style: device-agnostic, through torch.accelerator: the script asks torch
for an accelerator and how many there are, gives up when there are fewer
than two, picks each process's device with set_device_index and the backend
torch pairs with that device; its loader drops each rank's last, short
batch. On a machine without them the doctor stands GPUs in for the
accelerator. Planted fault: none."""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

NEEDED = 2


def device_for(index):
    kind = torch.accelerator.current_accelerator()
    torch.accelerator.set_device_index(index)
    return torch.device(kind.type, torch.accelerator.current_device_index())


def worker(index, world):
    device = device_for(index)
    backend = dist.get_default_backend_for_device(device)
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:29561",
                            rank=index, world_size=world)
    signal = torch.linspace(0, 6, 360).unsqueeze(1)
    dataset = TensorDataset(signal, torch.sin(signal))
    sampler = DistributedSampler(dataset, seed=11)
    loader = DataLoader(dataset, batch_size=40, sampler=sampler, pin_memory=True,
                        drop_last=True)
    net = DDP(nn.Sequential(nn.Linear(1, 24), nn.Tanh(), nn.Linear(24, 1)).to(device),
              device_ids=[device.index])
    opt = torch.optim.RMSprop(net.parameters(), lr=3e-3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad(set_to_none=True)
            nn.functional.l1_loss(net(x), y).backward()
            opt.step()
        torch.accelerator.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    if not torch.accelerator.is_available():
        sys.exit("this example needs an accelerator (none found)")
    found = torch.accelerator.device_count()
    if found < NEEDED:
        print(f"found {found} accelerator(s), this example needs {NEEDED}; stopping")
        sys.exit(0)
    mp.spawn(worker, args=(found,), nprocs=found)
