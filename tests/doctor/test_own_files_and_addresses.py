"""The doctor's notes say only what is true: what the script listened on, what it wrote.

A script that hosts its own store (``dist.TCPStore("0.0.0.0", ...)``) or
meets at ``init_method="tcp://0.0.0.0:PORT"`` is run on the loopback address
only, as the note says: nothing its processes start listens on every
interface. A worker given too few arguments fails in its ranks; the error
files torch's ``mp.spawn`` writes for them are torch's, not the script's.
"""

from __future__ import annotations

import textwrap

import pytest

from ddp_lesson import doctor

pytestmark = pytest.mark.usefixtures("no_leftovers")

MEETS = {
    "store": 'store = dist.TCPStore("0.0.0.0", port, world_size, rank == 0, timedelta(60))\n'
    '    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)',
    "tcp": 'dist.init_process_group("gloo", init_method=f"tcp://0.0.0.0:{port}", rank=rank,\n'
    "                            world_size=world_size)",
}

SCRIPT = """
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def main(rank, world_size, port):
    {meet}
    model = DDP(torch.nn.Linear(2, 1))
    model(torch.ones(4, 2)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(main, args=(2, port), nprocs=2)
"""

#: Addresses that reach this machine only.
LOOPBACK = {"127.0.0.1", "::1"}


@pytest.mark.parametrize("meet", MEETS, ids=MEETS)
def test_a_script_meeting_on_every_interface_is_run_on_loopback_as_the_note_says(
    meet, tmp_path, listening
):
    script = tmp_path / f"meets_{meet}.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("{meet}", MEETS[meet]))
    result = doctor.diagnose(script, 2)
    said = " ".join(str(result).split())  # (the text is wrapped)
    assert result.ok, said
    assert "listens on every network interface" in said and "127.0.0.1 only" in said, said
    assert listening and listening <= LOOPBACK, f"the run listened on {sorted(listening)}"


def test_torchs_error_files_are_not_named_as_the_scripts_writes(tmp_path):
    worker = tmp_path / "needs_port.py"
    worker.write_text(
        "import os\n"
        "import torch.distributed as dist\n\n\n"
        "def main(rank, world_size, port):\n"
        '    os.environ["MASTER_ADDR"] = "127.0.0.1"\n'
        '    os.environ["MASTER_PORT"] = str(port)\n'
        '    dist.init_process_group("gloo", rank=rank, world_size=world_size)\n'
        "    dist.destroy_process_group()\n"
    )
    result = doctor.diagnose(worker, 2)  # no port given: main's call fails in every rank
    said = " ".join(str(result).split())  # (the text is wrapped)
    assert "missing a required argument: 'port'" in said, said
    assert "pytorch-errorfile" not in said and "wrote or deleted" not in said, said


@pytest.mark.parametrize(
    "join", ["mp.spawn(main, nprocs=2)", "mp.spawn(main, nprocs=2, join=False).join()"]
)
def test_a_raising_ranks_error_file_is_not_left_behind(tmp_path, join):
    """torch's mp.spawn leaves a raising rank's error file in the temporary folder."""
    import glob
    import tempfile

    pattern = f"{tempfile.gettempdir()}/pytorch-errorfile-*"
    before = set(glob.glob(pattern))
    script = tmp_path / "raises.py"
    script.write_text(
        "import torch.multiprocessing as mp\n\n\n"
        "def main(rank):\n"
        "    raise ValueError(f'rank {rank} gives up')\n\n\n"
        'if __name__ == "__main__":\n'
        f"    {join}\n"
    )
    result = doctor.diagnose(script, 2)
    said = " ".join(str(result).split())
    assert "gives up" in said, said
    assert "pytorch-errorfile" not in said, said
    assert set(glob.glob(pattern)) <= before, "the doctor's run left torch's error files"
