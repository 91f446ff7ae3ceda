"""A diagnosis never changes the user's files.

The doctor runs a script for real, and scripts write: checkpoints,
snapshots, logs. Each test here diagnoses a script that saves, appends,
renames and deletes files in its own folder, by relative and absolute
paths, in each of the three launch styles, and hashes that folder before
and after: names, kinds, modes, sizes, modification times and contents
must all be as they were. The scripts also check from inside that the
run still works as it would for real: inputs are read where they lie,
what rank 0 saved is what the others load, a deleted file is gone.

The layer's rules are then checked one by one in a fresh process, and a
write the layer cannot redirect (another program's) is reported.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddp_lesson import doctor

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: What every script does with files, rank 0 writing and every rank reading back.
FILES = '''
def touch_files(rank, epoch):
    if rank == 0:
        torch.save(model_state(), "checkpoint.pt")                  # replaces the user's
        torch.save({"epoch": epoch}, os.path.join(HERE, "snapshot.pt"))  # absolute, new
        with open("train.log", "a") as log:                         # appended to
            log.write(f"epoch {epoch}\\n")
        os.makedirs(os.path.join(HERE, "runs", "today"), exist_ok=True)
        Path(HERE, "runs", "today", "metrics.json").write_text(json.dumps({"epoch": epoch}))
    dist.barrier()
    assert set(torch.load("checkpoint.pt")) == {"weight", "bias"}   # what rank 0 saved
    assert open("train.log").read().startswith("the user's log\\n")
    dist.barrier()


def clean_up(rank):
    if rank == 0:
        os.remove("stale.txt")
        Path(HERE, "old.txt").unlink()
        shutil.rmtree(os.path.join(HERE, "cache"))
        os.replace("notes.txt", "notes.bak")
        Path("touched.txt").touch()
        os.chmod("inputs/scale.txt", 0o600)
        assert not os.path.exists("stale.txt") and not os.path.exists("cache")
        assert sorted(os.listdir(os.path.join(HERE, "runs"))) == [".keep", "today"]
        assert "old.txt" not in os.listdir(HERE) and "notes.bak" in os.listdir(".")
        assert open("notes.bak").read() == "the user's notes\\n"
'''

HEAD = '''import json
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from helpers import scale

HERE = os.path.dirname(os.path.abspath(__file__))
model = None


def model_state():
    return model.module.state_dict()
'''

TRAIN = '''
def train(rank):
    global model
    data = TensorDataset(torch.randn(64, 4) * scale(), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        touch_files(rank, epoch)
    clean_up(rank)
'''

#: The three launch styles the doctor knows, each around the same training.
STYLES = {
    "spawn": '''
def main(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "29533"  # (the doctor meets on a port of its own)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(main, args=(2,), nprocs=2)
''',
    "torchrun": '''
if __name__ == "__main__":
    dist.init_process_group("gloo")
    train(int(os.environ["RANK"]))
    dist.destroy_process_group()
''',
    "worker": '''
def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(rank)
    dist.destroy_process_group()
''',
}


def user_folder(root: Path) -> Path:
    """A user's folder with a week's checkpoint, a log, inputs and files to lose."""
    folder = root / "project"
    for name, text in {
        "checkpoint.pt": "a week of training\n",
        "train.log": "the user's log\n",
        "stale.txt": "s\n",
        "old.txt": "o\n",
        "notes.txt": "the user's notes\n",
        "touched.txt": "t\n",
        "inputs/scale.txt": "2.0\n",
        "cache/deep/kept.bin": "c\n",
        "runs/.keep": "",
        "helpers.py": "def scale():\n    return float(open('inputs/scale.txt').read())\n",
    }.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def state(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: kind, mode, size, modification time, content hash."""
    found = {}
    for top, names, files in os.walk(folder):
        for name in names + files:
            path = Path(top, name)
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            found[str(path.relative_to(folder))] = (
                info.st_mode, info.st_size, info.st_mtime_ns, digest
            )
    found["."] = (folder.stat().st_mode, folder.stat().st_mtime_ns)
    return found


@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("where", ["in its folder", "elsewhere"])
def test_a_diagnosis_leaves_the_users_folder_as_it_was(style, where, tmp_path, monkeypatch):
    folder = user_folder(tmp_path)
    script = folder / "train.py"
    script.write_text(HEAD + FILES + TRAIN + STYLES[style])
    # relative paths are relative to where the user stands: the script's folder or another
    monkeypatch.chdir(folder if where == "in its folder" else tmp_path)
    if where == "elsewhere":
        for name in ("inputs", "helpers.py", "stale.txt", "notes.txt", "touched.txt"):
            os.symlink(folder / name, tmp_path / name)
        (tmp_path / "checkpoint.pt").write_text("another week\n")
        (tmp_path / "train.log").write_text("the user's log\n")
        (tmp_path / "runs").mkdir()
    before, here_before = state(folder), state(tmp_path)
    result = doctor.diagnose(script, 2)
    shown = str(result)
    assert result.ok and result.exit_code == 0, shown + result.output
    assert state(folder) == before, shown
    assert state(tmp_path) == here_before, shown
    notes = " ".join(result.notes)
    assert "checkpoint.pt" in notes and "your files are as they were" in notes, shown
    assert not list(folder.rglob("__pycache__")), "the run wrote Python's byte-code cache"


def test_a_program_the_script_starts_is_named_since_its_writes_are_not_kept_aside(
    tmp_path, monkeypatch
):
    folder = user_folder(tmp_path)
    script = folder / "shell.py"
    script.write_text(
        textwrap.dedent('''
        import subprocess

        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP


        def main(rank, world_size):
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
            model = DDP(torch.nn.Linear(2, 1))
            model(torch.ones(1, 2)).sum().backward()
            if rank == 0:  # another program, which reads the user's file
                subprocess.run(["cat", "train.log"], check=True, capture_output=True)
            dist.destroy_process_group()
        ''')
    )
    monkeypatch.chdir(folder)
    result = doctor.diagnose(script, 2)
    notes = " ".join(result.notes)
    lines = script.read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(lines) if "subprocess.run" in text)
    assert f"starts other programs (line {line})" in notes, str(result)
    assert "not what those programs write" in notes


#: The layer's rules, each checked in a process of its own (installing is for good).
RULES = r'''
import errno, os, shutil, sys
from pathlib import Path
from ddp_lesson.doctor import sandbox

user, root = sys.argv[1], sys.argv[2]
os.chdir(user)
sandbox.install(root, [root + "-own"])

def fails(error, call, *args):
    try:
        call(*args)
    except error:
        return
    raise AssertionError(f"{call.__name__}{args} did not raise {error.__name__}")

# reading sees the real files; writing them leaves them alone and reads back the new
assert open("data.txt").read() == "input\n"
open("data.txt", "w").write("new\n")
assert open("data.txt").read() == "new\n" and Path("data.txt").read_text() == "new\n"
# appending keeps what was there; 'x' refuses an existing file, as it would for real
with open("log.txt", "a") as log:
    log.write("more\n")
assert open("log.txt").read() == "log\nmore\n"
fails(FileExistsError, open, "log.txt", "x")
fails(FileExistsError, os.open, "log.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
# a folder that does not exist still does not exist
fails(FileNotFoundError, open, "nowhere/file.txt", "w")
# deleting hides; listing and stat agree; a new file of the same name comes back
os.remove("data.txt")
assert not os.path.exists("data.txt") and "data.txt" not in os.listdir(".")
fails(FileNotFoundError, os.remove, "data.txt")
fails(FileNotFoundError, open, "data.txt")
open("data.txt", "w").write("again\n")
assert open("data.txt").read() == "again\n" and "data.txt" in os.listdir(".")
# a folder deleted and made again is empty, even of the real files it had
shutil.rmtree("folder")
assert not os.path.isdir("folder")
os.makedirs("folder/inner")
assert os.listdir("folder") == ["inner"] and not os.path.exists("folder/kept.txt")
fails(FileExistsError, os.mkdir, "folder")
# rename moves content; the old name is gone
os.rename("log.txt", "moved.txt")
assert open("moved.txt").read() == "log\nmore\n" and not os.path.exists("log.txt")
fails(OSError, os.rmdir, "folder")
# the layer's own folders and the system's are used as they are
Path(root + "-own").mkdir()
Path(root + "-own", "real.txt").write_text("real\n")
with open("/dev/null", "w") as null:
    null.write("x")
print("ok")
'''


def test_the_layer_keeps_every_change_and_shows_it_back(tmp_path):
    user = tmp_path / "user"
    (user / "folder").mkdir(parents=True)
    (user / "folder" / "kept.txt").write_text("k\n")
    (user / "data.txt").write_text("input\n")
    (user / "log.txt").write_text("log\n")
    before = state(user)
    root = tmp_path / "layer"
    done = subprocess.run(
        [sys.executable, "-c", RULES, str(user), str(root)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert state(user) == before
    assert (tmp_path / "layer-own" / "real.txt").read_text() == "real\n"
    from ddp_lesson.doctor import sandbox

    kept = [os.path.relpath(p, user) for p in sandbox.written(str(root))]
    expected = {"data.txt", "log.txt", "moved.txt", "folder/kept.txt", "folder/inner"}
    assert set(kept) == expected, kept


def test_a_folder_that_was_there_already_is_not_named_as_written(tmp_path):
    # The layer makes the folders above a file it keeps; when the script then
    # deletes that file (a temporary file in /tmp, say), only an empty copy of
    # a folder the user already had is left: nothing of the user's changed.
    from ddp_lesson.doctor import sandbox

    there = tmp_path / "there"
    there.mkdir()
    root = tmp_path / "layer"
    (root / "files" / str(there).lstrip("/")).mkdir(parents=True)
    new = tmp_path / "made_by_the_script"
    (root / "files" / str(new).lstrip("/")).mkdir(parents=True)
    assert sandbox.written(str(root)) == [str(new)]
