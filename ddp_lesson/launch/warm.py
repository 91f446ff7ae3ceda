"""What the warm server imports once, so that every rank forked from it starts at once.

A launch forks its ranks from a server process (multiprocessing's
forkserver) that imported this module when it started: torch, what the
first ``DDP(...)`` call of a process imports (part of torch's compiler),
and the course's rank-side modules. A fresh interpreter pays about 0.9 s
for ``import torch`` and about 1 s more at its first ``DDP(...)``; a rank
forked from the server pays neither. The server never touches CUDA, so a
rank forked from it may.
"""

import torch
import torch._dynamo  # noqa: F401  (the first DDP(...) call imports it otherwise)
import torch.distributed  # noqa: F401
import torch.nn.functional  # noqa: F401
from torch.nn.parallel import DistributedDataParallel  # noqa: F401
from torch.utils.data import DataLoader  # noqa: F401
from torch.utils.data.distributed import DistributedSampler  # noqa: F401

from .. import data, devices, models, reports  # noqa: F401
from . import processes, ranks  # noqa: F401

processes.remove_launchers_folder_at_exit()

torch.zeros(1)  # the first tensor allocates torch's CPU allocator state once, here
