"""What `12_batches` measures in `workers/real_seeds.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import multiprocessing
import warnings

from ddp_lesson.reports import send_report

# the course's ranks start from a fork server and inherit its way of
# starting processes; a script starts its loader's workers the platform's
# way (fork on Linux), so this rank goes back to that
multiprocessing.set_start_method(None, force=True)
# on a machine with one core, PyTorch warns that two workers are more
# than the cores; the workers here do next to nothing
warnings.filterwarnings("ignore", message="This DataLoader will create")
seen = {False: ([], []), True: ([], [])}


def record(per_rank, indices, noise):
    seen[per_rank][0].extend(int(i) for i in indices)
    seen[per_rank][1].extend(round(float(n), 4) for n in noise)


def report(rank):
    send_report(rank, **{("per_rank" if key else "same"): value
                         for key, value in seen.items()})
