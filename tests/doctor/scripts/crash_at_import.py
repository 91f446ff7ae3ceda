"""Crashes while being imported, before any process could run main."""
import torch.multiprocessing as mp

SETTINGS = {"epochs": 3}
EPOCHS = SETTINGS["epoch"]  # a typo: KeyError at import


def main(rank, world_size):
    pass


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
