# Right, written differently: the meeting place kept in a dataclass, in a file that uses
# postponed annotations (dataclasses then look the module up while the file loads).
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Meeting:
    address: str
    port: int

    def export(self) -> None:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = self.address, str(self.port)


def ddp_setup(rank: int, world_size: int, port: int) -> None:
    Meeting("127.0.0.1", port).export()
    gpus = torch.cuda.device_count() >= world_size
    if gpus:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpus else "gloo", rank=rank, world_size=world_size)


def cleanup() -> None:
    dist.destroy_process_group()
