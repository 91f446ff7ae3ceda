"""What `19_uneven_inputs` measures in `workers/uneven.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import multiprocessing
import warnings

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

# the course's ranks start from a fork server and inherit its way of
# starting processes; a script starts its loader's workers the platform's
# way (fork on Linux), so this rank goes back to that
multiprocessing.set_start_method(None, force=True)
# on a machine with one core, PyTorch warns that two workers are more
# than the cores; the workers here do next to nothing
warnings.filterwarnings("ignore", message="This DataLoader will create")
seen = []  # the stream's item numbers, one list per step


def record(indices):
    seen.append([int(i) for i in indices])


def report(rank, model):
    items = sorted(sum(seen, []))
    send_report(rank, steps=len(seen), items=items, items_read=len(items),
                params=flat_parameters(model))
