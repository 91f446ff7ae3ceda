# Wrong, in a style of its own: counts the calling process as one of the ranks, so it starts
# one process fewer than world_size (and the calling process never runs main).
import torch.multiprocessing as mp


def start(main, world_size, port):
    others = world_size - 1
    mp.start_processes(main, args=(world_size, port), nprocs=others, start_method="spawn")
