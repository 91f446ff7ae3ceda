"""What `15_first_week` measures in `workers/first_loader.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import multiprocessing
import warnings

from ddp_lesson.reports import send_report, watch_indices

# the course's ranks start from a fork server and inherit its way of
# starting processes; a script starts its loader's workers the platform's
# way (fork on Linux), so this rank goes back to that
multiprocessing.set_start_method(None, force=True)
# on a machine with one core, PyTorch warns that two workers are more
# than the cores; the workers here do next to nothing
warnings.filterwarnings("ignore", message="This DataLoader will create")
runs = []


def record(loader):
    """Write down, each epoch, the indices ``loader`` hands out and its worker processes."""
    run = {"persistent": loader.persistent_workers, "indices": [], "workers": set()}
    runs.append(run)
    before = {p.pid for p in multiprocessing.active_children()}

    def epoch_done(epochs):
        # the epoch's workers are alive until its last batch is taken
        alive = {p.pid for p in multiprocessing.active_children()}
        run["workers"] |= alive - before

    watch_indices(loader, run["indices"], epoch_done)


def report(rank):
    for run in runs:
        run["workers_started"] = len(run.pop("workers"))
    send_report(rank, runs=runs)
