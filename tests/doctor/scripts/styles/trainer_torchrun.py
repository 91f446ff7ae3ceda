"""Style: class-based, written for torchrun: the rank comes from the
environment, init_process_group() finds the group through env://, and main()
takes no arguments. Planted fault: none."""
import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.train_data = train_data
        self.optimizer = optimizer
        self.model = DDP(model)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self.train_data.sampler.set_epoch(epoch)
            for source, targets in self.train_data:
                self._run_batch(source, targets)


def load_train_objs():
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(384, 8, generator=generator)
    targets = features @ torch.arange(8.0).unsqueeze(1)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return TensorDataset(features, targets), model, optimizer


def main():
    parser = argparse.ArgumentParser(description="run me with torchrun")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    init_process_group(backend="gloo")
    dataset, model, optimizer = load_train_objs()
    loader = DataLoader(dataset, batch_size=24, sampler=DistributedSampler(dataset))
    Trainer(model, loader, optimizer).train(args.epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
