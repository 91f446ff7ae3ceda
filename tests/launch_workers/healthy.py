"""Joins the group, sums ranks, and reports what a rank can see of itself."""

import gc
import os
from datetime import timedelta

import psutil
import torch
from torch.distributed import all_reduce, destroy_process_group, init_process_group

from ddp_lesson.reports import send_report


def main(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=20))
    total = torch.tensor([float(rank)])
    all_reduce(total)
    # Everything this rank and the launching process listen on, while the group is up.
    listening = sorted(
        {
            c.laddr.ip
            for c in psutil.net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.pid in (os.getpid(), os.getppid())
        }
    )
    destroy_process_group()
    send_report(
        rank,
        pid=os.getpid(),
        threads=torch.get_num_threads(),
        total=total.item(),
        listening=listening,
        # the course's pause after destroy_process_group (launch/ranks.py), as imported here
        destroy_pauses=destroy_process_group.__code__.co_name == "pausing",
        # the garbage collector: on, and (forked warm) skipping the server's frozen imports
        collecting=gc.isenabled(),
        frozen=gc.get_freeze_count(),
    )
