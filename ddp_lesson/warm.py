"""What a rank started by :func:`ddp_lesson.launch.start` has imported before it begins.

The forkserver behind ``launch.start`` imports this module once; every rank
it forks starts with all of it in memory instead of importing it again
(about 1.5 s for torch and 1.3 s for what the first ``DDP(...)`` call
imports, per process, on a 2-core machine).
"""

import torch
import torch._dynamo  # noqa: F401  (the first DDP(...) call imports it otherwise)
import torch.distributed  # noqa: F401
import torch.nn.functional  # noqa: F401
from torch.nn.parallel import DistributedDataParallel  # noqa: F401
from torch.utils.data import DataLoader  # noqa: F401
from torch.utils.data.distributed import DistributedSampler  # noqa: F401

from . import data, devices, models, probes, reports  # noqa: F401

torch.zeros(1)  # the first tensor allocates torch's CPU allocator state once, here
