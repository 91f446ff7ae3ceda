"""Each rank reads its own half of a small corpus and builds the vocabulary from it, so
the ranks' embedding tables differ in size and DDP refuses the model. The data is split
by hand (no sampler), as it should be without a DistributedSampler."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

CORPUS = ["the cat sat", "a dog ran far", "the bird flew", "one fish swam away", "cats nap",
          "dogs bark loud", "birds sing", "fish blow bubbles"]


def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29843",
                            rank=rank, world_size=world_size)
    mine = CORPUS[rank::world_size]
    vocab = {word: i for i, word in enumerate(sorted({w for s in mine for w in s.split()}))}
    rows = [torch.tensor([vocab[w] for w in s.split()][:2]) for s in mine]
    loader = DataLoader(rows, batch_size=2)
    model = DDP(nn.EmbeddingBag(len(vocab), 4))
    for batch in loader:
        model(batch).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
