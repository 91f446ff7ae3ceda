"""Every way Python lists, opens, links or truncates a file goes through the doctor's layer.

Listing (``os.scandir``, and ``glob``, ``os.walk`` and ``Path.glob`` built
on it) shows what the run wrote and hides what it deleted; ``io.FileIO``,
``os.truncate``, ``os.symlink`` and ``os.link`` change the layer's copies,
never the user's files; ``os.access`` answers for what the run sees. Each
route is tried in a fresh process, and the user's folder is hashed before
and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from test_sandbox import state

from ddp_lesson import doctor

pytestmark = pytest.mark.usefixtures("no_leftovers")

ROUTES = r'''
import glob, io, os, sys
from pathlib import Path
from ddp_lesson.doctor import sandbox

user, root = sys.argv[1], sys.argv[2]
os.chdir(user)
sandbox.install(root)
parts = [f"part-{i}.bin" for i in range(3)]

# listing: what the run wrote is there, what it deleted is not
for i, name in enumerate(parts):
    Path("shards", name).write_bytes(bytes([i]) * (i + 1))
os.remove("shards/old.bin")
assert sorted(glob.glob("shards/*.bin")) == [f"shards/{n}" for n in parts]
assert sorted(p.name for p in Path(user).glob("shards/*.bin")) == parts
assert sorted(glob.glob("**/*.bin", recursive=True)) == [f"shards/{n}" for n in parts]
walked = {name for _, _, names in os.walk(".") for name in names}
assert set(parts) <= walked and "old.bin" not in walked and "data.txt" in walked
with os.scandir("shards") as entries:
    seen = {e.name: (e.is_file(), e.is_dir(), e.stat().st_size, e.path) for e in entries}
assert seen == {n: (True, False, i + 1, os.path.join("shards", n)) for i, n in enumerate(parts)}
assert sorted(e.name for e in os.scandir(".")) == sorted(os.listdir("."))

# io.FileIO: truncating and appending happen to the layer's copy
with io.FileIO("checkpoint.pt", "w") as raw:
    pass
assert os.path.getsize("checkpoint.pt") == 0
with io.FileIO(os.path.join(user, "checkpoint.pt"), "a") as raw:
    raw.write(b"new")
assert Path("checkpoint.pt").read_bytes() == b"new"
with io.FileIO("data.txt") as raw:
    assert raw.read() == b"input\n"
try:
    io.FileIO("data.txt", "x")
except FileExistsError:
    pass
else:
    raise AssertionError("io.FileIO(..., 'x') opened a file the run can see")

# truncating by name, and through a file opened for update
os.truncate("notes.txt", 3)
assert open("notes.txt").read() == "the"
with open("log.txt", "r+") as log:
    log.truncate(0)
assert open("log.txt").read() == ""

# os.access answers for what the run sees
assert os.access("shards/part-0.bin", os.R_OK) and not os.access("shards/old.bin", os.F_OK)

# a symbolic link, relative or absolute: reading and writing through it
os.symlink("data.txt", "latest.txt")
assert os.path.islink("latest.txt") and open("latest.txt").read() == "input\n"
with open("latest.txt", "w") as through:
    through.write("through the link\n")
assert open("data.txt").read() == "through the link\n"
Path("best.txt").symlink_to(Path(user, "config.txt"))
with open("best.txt", "a") as through:
    through.write("more\n")
assert open("config.txt").read() == "lr=0.1\nmore\n"
os.symlink("not-yet.txt", "dangling.txt")
Path("not-yet.txt").write_text("later\n")
assert open("dangling.txt").read() == "later\n"
try:
    os.symlink("data.txt", "latest.txt")
except FileExistsError:
    pass
else:
    raise AssertionError("a second link of the same name was made")

# a hard link: a file of the new name with the old content
os.link("shards/part-2.bin", "hard.bin")
assert Path("hard.bin").read_bytes() == bytes([2]) * 3
with open("hard.bin", "wb") as hard:
    hard.write(b"x")
print("ok")
'''


def test_every_route_sees_the_runs_files_and_leaves_the_users_alone(tmp_path):
    user = tmp_path / "user"
    (user / "shards").mkdir(parents=True)
    (user / "shards" / "old.bin").write_bytes(b"old")
    for name, text in {"data.txt": "input\n", "notes.txt": "the user's notes\n",
                       "log.txt": "log\n", "config.txt": "lr=0.1\n",
                       "checkpoint.pt": "a week of training\n"}.items():  # fmt: skip
        (user / name).write_text(text)
    before = state(user)
    root = tmp_path / "layer"
    done = subprocess.run(
        [sys.executable, "-c", ROUTES, str(user), str(root)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert state(user) == before
    from ddp_lesson.doctor import sandbox

    kept = {os.path.relpath(p, user) for p in sandbox.written(str(root))}
    made = {"latest.txt", "best.txt", "dangling.txt", "not-yet.txt", "hard.bin"}
    changed = {"checkpoint.pt", "notes.txt", "log.txt", "data.txt", "config.txt"}
    shards = {f"shards/part-{i}.bin" for i in range(3)} | {"shards/old.bin"}
    assert kept == made | changed | shards, kept


SHARDS = """
import glob
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(torch.nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()
    torch.save(model.module.state_dict(), f"shard-{rank}.pt")
    dist.barrier()
    found = sorted(glob.glob("shard-*.pt"))
    if len(found) != world_size:
        raise RuntimeError(f"rank {rank} found {found}")
    for path in found:
        torch.load(path)
    dist.destroy_process_group()
"""


def test_a_script_that_globs_what_it_saved_runs_as_it_would_for_real(tmp_path, monkeypatch):
    script = tmp_path / "shards.py"
    script.write_text(textwrap.dedent(SHARDS))
    (tmp_path / "shard-9.pt.bak").write_text("the user's\n")
    before = state(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = doctor.diagnose(script, 2)
    assert result.ok and result.exit_code == 0, str(result) + result.output
    assert state(tmp_path) == before
