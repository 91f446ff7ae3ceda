"""Style: class-based, in the shape of PyTorch's multi-GPU example: a Trainer
that builds its loader in one method and wraps its model in another, started
with mp.spawn from an argparse __main__ block. Planted fault: none."""
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
    def __init__(self, model, dataset, rank, batch_size):
        self.rank = rank
        self.train_data = self._build_loader(dataset, batch_size)
        self.model = self._wrap(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)

    def _build_loader(self, dataset, batch_size):
        sampler = DistributedSampler(dataset)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    def _wrap(self, model):
        return DDP(model)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def load_train_objs():
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(512, 16, generator=generator)
    labels = (features.sum(dim=1) > 0).long()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
    )
    return TensorDataset(features, labels), model


def main(rank, world_size, total_epochs, batch_size):
    ddp_setup(rank, world_size)
    dataset, model = load_train_objs()
    trainer = Trainer(model, dataset, rank, batch_size)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a small distributed training job")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    mp.spawn(main, args=(args.world_size, args.epochs, args.batch_size),
             nprocs=args.world_size)
