"""Train a small network on scikit-learn's digits with DDP, on one machine or several.

Runs on every rank, with NCCL when each process has a GPU of its own and
gloo on a machine without GPUs. Start it either way:

    python ddp_train.py --epochs 10                        # mp.spawn
    torchrun --standalone --nproc-per-node=2 ddp_train.py  # torchrun

mp.spawn starts this machine's processes only; torchrun, started on every
machine with --nnodes and a rendezvous instead of --standalone, runs it on
several.

Rank 0 logs and writes a checkpoint after every epoch; a run started again
with the same --checkpoint goes on from the last complete epoch. Rank 0
alone reads the checkpoint and sends it to the others, so the machines of
a cluster need no shared folder.
"""
import argparse
import os
import signal
import socket
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def digits(split):
    """64 floats in [0, 1] and a label: the same 80/20 split on every rank."""
    from sklearn.datasets import load_digits  # ships with scikit-learn

    images, labels = load_digits(return_X_y=True)
    features = torch.tensor(images, dtype=torch.float32) / 16.0
    labels = torch.tensor(labels, dtype=torch.int64)
    seeded = torch.Generator().manual_seed(0)
    order = torch.randperm(len(labels), generator=seeded)
    n_test = len(labels) // 5
    chosen = order[:n_test] if split == "test" else order[n_test:]
    return TensorDataset(features[chosen], labels[chosen])


def network():
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def ddp_setup():
    """Select this process's device, then join the group; return it."""
    local_rank = int(os.environ["LOCAL_RANK"])  # its number on this machine
    processes, gpus = os.environ["LOCAL_WORLD_SIZE"], torch.cuda.device_count()
    if gpus == 0:  # a machine without GPUs: CPU processes over gloo
        device, backend = torch.device("cpu"), "gloo"
    elif gpus < int(processes):  # never a silent fall back to the CPU
        sys.exit(f"{processes} processes on this machine but {gpus} GPUs: "
                 f"start at most {gpus} (--nproc-per-node, or --nprocs)")
    else:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # first: calls naming no device use it
        backend = "nccl"
    # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment
    dist.init_process_group(backend, timeout=timedelta(minutes=5),
                            device_id=device if backend == "nccl" else None)
    return device


def read_checkpoint(checkpoint):
    """What an earlier run saved in checkpoint, or None if there is no file.

    A file that cannot be used ends the program with one line saying why.
    """
    if not os.path.exists(checkpoint):
        return None
    fix = "delete it or pass another --checkpoint"
    try:  # weights_only: tensors and plain containers, never code
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as error:  # cut short, corrupted, not from torch.save
        why = type(error).__name__  # and the first sentence of its message
        if str(error).strip():
            why += ": " + str(error).strip().split("\n")[0].split(". ")[0]
        sys.exit(f"cannot resume from {checkpoint}: torch.load cannot read "
                 f"it ({why}); {fix}")
    keys = {"model", "optimizer", "epoch"}  # what train() saves
    if not isinstance(state, dict) or state.keys() != keys:
        sys.exit(f"cannot resume from {checkpoint}: it is not a checkpoint "
                 f"of this script (model, optimizer, epoch); {fix}")
    try:  # the same names and shapes as network()'s, or another model's
        network().load_state_dict(state["model"])
    except Exception:
        sys.exit(f"cannot resume from {checkpoint}: its weights do not fit "
                 f"this script's network(); {fix}")
    return state


def train(device, epochs, checkpoint, batch_size):
    rank = dist.get_rank()  # global rank: which share of the data, who logs
    torch.manual_seed(0)
    train_dataset = digits("train")
    sampler = DistributedSampler(train_dataset)  # this rank's share, shuffled
    train_loader = DataLoader(train_dataset, batch_size=batch_size,
                              sampler=sampler)
    model = network().to(device)
    ids = [device.index] if device.type == "cuda" else None
    model = DDP(model, device_ids=ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    # Rank 0 alone reads the checkpoint and sends it to every rank: all of
    # them start at the same epoch, even where they cannot see its file.
    saved = [read_checkpoint(checkpoint) if rank == 0 else None]
    dist.broadcast_object_list(saved, src=0)
    start = 0
    if saved[0] is not None:  # go on after the last complete epoch
        model.module.load_state_dict(saved[0]["model"])
        optimizer.load_state_dict(saved[0]["optimizer"])
        start = saved[0]["epoch"] + 1
        if rank == 0 and start < epochs:
            print(f"resuming from {checkpoint} at epoch {start}")
        elif rank == 0:  # evaluate() below still tests what it holds
            print(f"{checkpoint} is at epoch {start} of {epochs}: "
                  "nothing left to train")

    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every rank
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over all ranks here
            optimizer.step()
        if rank == 0:  # one writer, one log: every rank holds the same model
            print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
            state = {"model": model.module.state_dict(),
                     "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(state, checkpoint + ".partial")
            os.replace(checkpoint + ".partial", checkpoint)  # never half
        dist.barrier()  # nobody goes on before the checkpoint is complete
    return model


def evaluate(model, device):
    """Test accuracy, on rank 0 alone: model.module makes no collective."""
    features, labels = digits("test").tensors
    with torch.no_grad():
        predicted = model.module(features.to(device)).argmax(dim=1)
    return (predicted == labels.to(device)).float().mean().item()


def run(args):
    """What every process does, however it was started."""
    device = ddp_setup()
    try:
        model = train(device, args.epochs, args.checkpoint, args.batch_size)
        if dist.get_rank() == 0:
            print(f"test accuracy {evaluate(model, device):.4f}")
    finally:
        dist.destroy_process_group()
        # A workaround for a torch problem at exit, not part of DDP: one of
        # gloo's threads still frees the last collective, which takes
        # Python's lock; if Python is shutting down by then, the process
        # aborts. Sleeping lets go of the lock and lets that thread finish.
        time.sleep(0.05)


def spawned(rank, world_size, port, args):
    """Started by mp.spawn: set what torchrun would have set, then run."""
    # All ranks are on this one machine, so the rank on this machine
    # (LOCAL_RANK) is the rank itself; on several, torchrun sets both.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size),
                      MASTER_ADDR=args.addr, MASTER_PORT=str(port))
    run(args)


def free_port(addr):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def stop_ranks_on_signal(processes):
    """SIGINT or SIGTERM sent to this process alone stops the ranks too."""
    def stop(signum, frame):
        for process in processes:
            process.terminate()  # SIGTERM: a rank ends at once
        sys.exit(f"{signal.Signals(signum).name}: stopped every rank")
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def at_least_1(text):
    """An argparse type: a whole number, 1 or more."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=at_least_1, default=10)
    parser.add_argument("--batch-size", type=at_least_1, default=32)
    parser.add_argument("--checkpoint", default="checkpoint.pt")
    parser.add_argument("--nprocs", type=at_least_1, default=None,
                        help="mp.spawn only: default one per GPU, or 2 "
                             "CPU processes without GPUs")
    parser.add_argument("--addr", default="127.0.0.1",
                        help="mp.spawn only: where the ranks meet; the store "
                             "rank 0 hosts listens on every interface all "
                             "the same (torch 2.13)")
    parser.add_argument("--port", type=int, default=None,
                        help="mp.spawn only: default a free port")
    args = parser.parse_args()
    if os.environ.get("RANK", "0") == "0":  # rank 0 (or python's parent)
        # Only rank 0 writes and reads the checkpoint: check it before any
        # process trains, not after the first epoch.
        folder = os.path.dirname(os.path.abspath(args.checkpoint))
        try:
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as error:
            parser.error(f"--checkpoint {args.checkpoint}: cannot write in "
                         f"{folder} ({error.strerror}): create it or pick "
                         "another folder")
        read_checkpoint(args.checkpoint)  # one that cannot be used ends here
    return args


if __name__ == "__main__":
    args = arguments()
    if "LOCAL_RANK" in os.environ:  # torchrun started this process
        run(args)
    else:  # python ddp_train.py: start one process per device here
        # one per GPU; on a machine without GPUs, two CPU processes (gloo)
        world_size = args.nprocs or torch.cuda.device_count() or 2
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it
        port = args.port or free_port(args.addr)
        ranks = mp.spawn(spawned, args=(world_size, port, args),
                         nprocs=world_size, join=False)
        stop_ranks_on_signal(ranks.processes)
        while not ranks.join():  # True once all ended; raises if one failed
            pass
