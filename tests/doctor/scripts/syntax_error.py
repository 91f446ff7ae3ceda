"""Does not parse: a missing closing parenthesis."""
import torch.multiprocessing as mp


def main(rank, world_size):
    print(rank, world_size


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
