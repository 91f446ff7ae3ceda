"""Workers and scripts whose ranks start processes of their own, which try to outlive them.

Every rank starts a child that starts a grandchild in a session of its
own and then waits; the grandchild sleeps. Both carry ``token`` on their
command line, so a test can look for them anywhere on the machine.
"""

import subprocess
import sys

from ddp_lesson.reports import send_report

#: The child: starts a grandchild in a new session (it escapes the process group), then sleeps.
CHILD = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', sys.argv[1]],\n"
    "                 start_new_session=True)\n"
    "time.sleep(1000)\n"
)


def start_family(token):
    """Start this process's child (and through it a grandchild), both tagged with ``token``."""
    return subprocess.Popen([sys.executable, "-c", CHILD, token])


def main(rank, world_size, port, token):
    """Start a family and report; the rank returns at once, leaving its family behind."""
    child = start_family(token)
    send_report(rank, child=child.pid)


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import torch.multiprocessing as mp
from launch_workers import hostile


def main(rank, world_size, token):
    hostile.start_family(token)


if __name__ == "__main__":
    mp.spawn(main, args=(2, sys.argv[1]), nprocs=2)
"""

TORCHRUN = """
import sys
sys.path.insert(0, {tests!r})
from launch_workers import hostile

hostile.start_family(sys.argv[1])
"""
