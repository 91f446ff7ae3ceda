"""What the warm server imports once, so that every rank forked from it starts at once.

A launch forks its ranks from a server process (multiprocessing's
forkserver) that imported this module when it started: torch, what the
first ``DDP(...)`` call of a process imports (part of torch's compiler),
and the course's rank-side modules. A fresh interpreter imports torch
again, and part of its compiler at its first ``DDP(...)``, which takes
seconds (``make bench`` measures a launch both ways); a rank forked from
the server does neither. The server never touches CUDA, so a
rank forked from it may. In the server (which the launch starts with
``processes.SERVER_FOLDER_VARIABLE`` set), it installs
``destroy_process_group``'s pause (:func:`.launch.ranks.pause_after_destroy`),
so a forked process has it before it imports anything: a process of a
script's ``mp.spawn`` imports the script again first
(:func:`.launch.script_main.spawn_warm`). The server starts with SIGINT
held back (a notebook's stop button signals the kernel's whole process
group); once it has imported all this, it ignores SIGINT and tells the
launch it is ready (:func:`.launch.warm_server.server_ready`). Imported
anywhere else, it changes nothing of torch.

Python's cyclic garbage collector is kept out of the way while the server
imports: the imports create a great many long-lived objects, and the
collector would scan them again and again as they are made, which slows
the server's start for nothing. This module lies outside
``launch`` for that reason: importing that package imports torch before a
line of this one runs. Afterwards the objects are frozen (``gc.freeze``):
the collector of a rank forked from the server skips what it inherited
instead of scanning it, and the ranks collect their own objects as any
Python process does.
"""

import gc
import os

collecting = gc.isenabled()
gc.disable()

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401  (the first DDP(...) call imports it otherwise)
import torch.distributed  # noqa: E402,F401
import torch.nn.functional  # noqa: E402,F401
from torch.nn.parallel import DistributedDataParallel  # noqa: E402,F401
from torch.utils.data import DataLoader  # noqa: E402,F401
from torch.utils.data.distributed import DistributedSampler  # noqa: E402,F401

from . import data, devices, models, reports  # noqa: E402,F401
from .launch import processes, ranks, warm_server  # noqa: E402,F401

server = processes.SERVER_FOLDER_VARIABLE in os.environ  # this process is the warm server
if server:
    folder = processes.remove_launchers_folder_at_exit()
    ranks.pause_after_destroy()

torch.zeros(1)  # the first tensor allocates torch's CPU allocator state once, here
data._digits_arrays()  # the digits file, which most ranks load, read once here

# No gc.collect() first: it would scan every object the imports made, at every
# server's start, to free the few they left in cycles (functions, tuples,
# types; no open file or socket among them); the server's peak memory is the
# same either way.
gc.freeze()
if collecting:
    gc.enable()
if server:  # SIGINT held back until now; ignored from here on (see warm_server)
    warm_server.server_ready(folder)
