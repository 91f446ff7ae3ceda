# Right, written differently: a tcp:// init_method instead of environment variables.
import torch
import torch.distributed as dist


def ddp_setup(rank, world_size, port):
    backend = "nccl" if torch.cuda.device_count() >= world_size else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
    )


def cleanup():
    if dist.is_initialized():
        dist.destroy_process_group()
