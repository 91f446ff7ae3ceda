"""Style: class-based, as trainer.py, with a bookkeeping bug: the list of
epoch losses is one entry short, so every rank raises IndexError in the last
epoch, after four stages have worked. Planted fault: outside the stages."""
import argparse
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def ddp_setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    init_process_group(backend="gloo", rank=rank, world_size=world_size)


class Trainer:
    def __init__(self, model, dataset, rank, batch_size, max_epochs):
        self.rank = rank
        self.train_data = self._build_loader(dataset, batch_size)
        self.model = DDP(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.epoch_losses = [0.0] * (max_epochs - 1)

    def _build_loader(self, dataset, batch_size):
        sampler = DistributedSampler(dataset)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            last = self._run_batch(source, targets)
        self.epoch_losses[epoch] = last  # planted: outside

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def main(rank, world_size, total_epochs, batch_size):
    ddp_setup(rank, world_size)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(512, 16, generator=generator)
    labels = (features.sum(dim=1) > 0).long()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
    )
    trainer = Trainer(model, TensorDataset(features, labels), rank, batch_size,
                      total_epochs)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a small distributed training job")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    mp.spawn(main, args=(args.world_size, args.epochs, 32), nprocs=args.world_size)
