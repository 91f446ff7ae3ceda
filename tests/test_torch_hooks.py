"""torch's functions are changed in one module only, and are torch's own again after a launch.

``ddp_lesson/launch/torch_hooks.py`` is the one place that replaces a
function of torch (or of ``multiprocessing``). Two checks hold it there:
one reads every other module for an assignment to something of torch's,
the other compares torch's functions, object for object, before and after
importing every module of the package and after each kind of launch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddp_lesson.launch import torch_hooks

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddp_lesson"
HOOKS = PACKAGE / "launch" / "torch_hooks.py"

#: Where the course's changes of torch would show: every function of these.
SNAPSHOT = textwrap.dedent(
    """
    import importlib, inspect, multiprocessing.spawn, sys
    import torch, torch.distributed, torch.multiprocessing, torch.nn
    import torch.distributed.run
    import torch._dynamo  # (importing it replaces torch.manual_seed: torch's own doing)
    import torch.distributed.distributed_c10d
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.rendezvous import (
        c10d_rendezvous_backend, dynamic_rendezvous, static_tcp_rendezvous)
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, dataloader
    from torch.utils.data.distributed import DistributedSampler

    OWNERS = [
        torch, torch.cuda, torch.accelerator, torch.serialization, torch.autograd,
        torch.Tensor, torch.nn.Module, torch.distributed,
        torch.distributed.distributed_c10d, torch.multiprocessing,
        sys.modules["torch.multiprocessing.spawn"], multiprocessing.spawn,
        torch.distributed.run, api.MultiprocessContext, c10d_rendezvous_backend,
        static_tcp_rendezvous, dynamic_rendezvous.DynamicRendezvousHandler,
        DistributedDataParallel, DataLoader, dataloader._BaseDataLoaderIter,
        DistributedSampler,
    ]

    def snapshot():
        return {(getattr(o, "__name__", repr(o)), name): value
                for o in OWNERS for name, value in list(vars(o).items())
                if callable(value) or isinstance(value, (staticmethod, classmethod))}

    def changed(before, after):
        return sorted(f"{o}.{n}" for key in before.keys() | after.keys()
                      for o, n in [key] if before.get(key) is not after.get(key))
    """
)


def _run(code: str, timeout_s: float = 420) -> str:
    """Run ``code`` after :data:`SNAPSHOT` in a fresh interpreter; its output."""
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT + textwrap.dedent(code)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_importing_every_module_leaves_torch_as_it_was():
    out = _run(
        """
        import pkgutil, ddp_lesson
        before = snapshot()
        names = [m.name for m in pkgutil.walk_packages(ddp_lesson.__path__, "ddp_lesson.")
                 if not m.name.endswith("__main__")]  # (running it is what it does)
        for name in names:
            importlib.import_module(name)
        print("MODULES", len(names))
        print("CHANGED", changed(before, snapshot()))
        """
    )
    assert int(out.split("MODULES")[1].split()[0]) > 50
    assert "CHANGED []" in out, out


def test_every_kind_of_launch_leaves_torch_as_it_was(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            import socket

            import torch.distributed as dist
            import torch.multiprocessing as mp


            def main(rank, world_size, port):
                os.environ["MASTER_ADDR"] = "127.0.0.1"
                os.environ["MASTER_PORT"] = str(port)
                dist.init_process_group("gloo", rank=rank, world_size=world_size)
                dist.destroy_process_group()


            if __name__ == "__main__":
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    port = sock.getsockname()[1]
                mp.spawn(main, args=(2, port), nprocs=2)
            """
        )
    )
    elastic = tmp_path / "elastic.py"
    elastic.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\ndist.destroy_process_group()\n"
    )
    out = _run(
        f"""
        import contextlib, io
        import torch.multiprocessing as mp
        from ddp_lesson import doctor, launch
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from launch_workers import healthy

        before = snapshot()
        inside = []
        for warm in (True, False):
            with launch.bounded(2, timeout_s=120, warm=warm) as run:
                inside.append(changed(before, snapshot()))
                with launch.bounded(2, timeout_s=120, warm=warm):  # nested
                    pass
                mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
            print(f"bounded_warm={{warm}}", changed(before, snapshot()))
        print("INSIDE", inside[0])
        launch.run_ranks(healthy.main, 2)
        print("run_ranks", changed(before, snapshot()))
        launch.run_script({str(script)!r}, timeout_s=120)
        print("run_script", changed(before, snapshot()))
        launch.torchrun({str(elastic)!r}, nproc_per_node=2, timeout_s=180)
        print("torchrun", changed(before, snapshot()))
        with contextlib.redirect_stdout(io.StringIO()):
            doctor.diagnose({str(script)!r}, world_size=2)
        print("doctor", changed(before, snapshot()))
        try:
            with launch.bounded(2, timeout_s=60):
                raise KeyError("a cell that fails inside the block")
        except KeyError:
            pass
        print("failed_block", changed(before, snapshot()))
        """
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " [" in line)
    assert "start_processes" in lines.pop("INSIDE"), out  # handed over inside the block
    assert lines and set(lines.values()) == {"[]"}, out


def _torch_names(tree: ast.Module) -> set[str]:
    """Names a module binds to torch or multiprocessing (imports, and names made from them)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("torch", "multiprocessing"):
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in ("torch", "multiprocessing"):
                names.update(alias.asname or alias.name for alias in node.names)
    for node in ast.walk(tree):  # spawn = sys.modules["torch..."]; base = torch.X
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            text = ast.unparse(value)
            chain = isinstance(value, ast.Attribute | ast.Subscript)  # not an object made
            looked_up = text.startswith(("sys.modules['torch", "sys.modules.get('torch"))
            if isinstance(target, ast.Name) and (
                (chain and _root(value) in names) or looked_up
            ):
                names.add(target.id)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def torch_assignments(path: Path) -> list[str]:
    """Lines of ``path`` that assign to something of torch's (or call setattr on it)."""
    tree = ast.parse(path.read_text())
    names = _torch_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for each in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(each, ast.Attribute) and _root(each) in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
            and _root(node.args[0]) in names
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_torch_hooks_assigns_to_torch():
    found = [
        where
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HOOKS
        for where in torch_assignments(path)
    ]
    assert found == [], "these lines change torch outside launch/torch_hooks.py: " + ", ".join(
        found
    )


def test_the_reading_finds_an_assignment_to_torch(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import sys\nimport torch.multiprocessing as mp\nfrom torch import nn\n"
        "spawn = sys.modules['torch.multiprocessing.spawn']\n"
        "mp.spawn = print\nspawn.start_processes = print\nnn.Module.to = print\n"
        "setattr(nn.Module, 'cuda', print)\nother = object()\nother.x = 1\n"
        "saving = sys.modules.get('torch.serialization')\nsaving.save = print\n"
    )
    sample = sample.rename(ROOT / "tests" / f"_sample_{tmp_path.name}.py")
    try:
        lines = [int(w.rsplit(":", 1)[1]) for w in torch_assignments(sample)]
    finally:
        sample.unlink()
    assert sorted(lines) == [5, 6, 7, 8, 12]


def test_handed_blocks_nest_and_put_back_the_same_object():
    import torch.multiprocessing as mp

    own = mp.start_processes
    calls = []

    def outer(underneath, *args, **kwargs):
        calls.append("outer")
        return "outer"

    def inner(underneath, *args, **kwargs):
        calls.append("inner")
        return underneath(*args, **kwargs)

    with torch_hooks.handed(torch_hooks.START_PROCESSES, outer):
        assert mp.start_processes is not own
        assert torch_hooks.underneath(torch_hooks.START_PROCESSES) is own
        with torch_hooks.handed(torch_hooks.START_PROCESSES, inner):
            assert mp.start_processes(print) == "outer"
        assert mp.start_processes(print) == "outer"
    assert calls == ["inner", "outer", "outer"]
    assert mp.start_processes is own
    assert sys.modules["torch.multiprocessing.spawn"].start_processes is own


def test_a_held_point_is_not_handed_over(monkeypatch):
    import torch.multiprocessing as mp

    monkeypatch.setattr(torch_hooks, "_held", {torch_hooks.START_PROCESSES})
    own = mp.start_processes
    with torch_hooks.handed(torch_hooks.START_PROCESSES, print) as handed:
        assert not handed
        assert mp.start_processes is own


@pytest.mark.parametrize("times", [1, 2])
def test_wrapping_twice_with_the_same_make_wraps_once(times, monkeypatch):
    class Owner:
        @staticmethod
        def f():
            return 1

    def add_one(previous):
        return lambda: previous() + 1

    monkeypatch.setattr(torch_hooks, "_wrapped", [])
    where = torch_hooks.point(Owner, "f")
    for _ in range(times):
        torch_hooks.wrap(where, add_one)
    assert Owner.f() == 2


#: A diagnosed script's own look at torch: what the course replaced, and what it declared.
REPLACED = SNAPSHOT + textwrap.dedent(
    """
    from ddp_lesson.launch import torch_hooks

    def report(who):
        ours = sorted(f"{o}.{n}" for (o, n), value in snapshot().items()
                      if getattr(value, "__module__", "").startswith("ddp_lesson"))
        declared = set(torch_hooks.changes())
        line = f"{who} UNDECLARED {[name for name in ours if name not in declared]}"
        sys.stdout.write(line + "\\n")  # one write, so that two ranks' lines never mix
        sys.stdout.flush()
    """
)


@pytest.mark.parametrize("route", ["script", "worker", "torchrun"])
def test_every_change_a_diagnosed_process_sees_is_declared(route, tmp_path):
    from ddp_lesson import doctor

    body = textwrap.dedent(
        """
        import os

        import torch
        import torch.distributed as dist


        def main(rank, world_size):
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
            torch.save({"rank": rank}, f"saved-{rank}.pt")
            for turn in range(world_size):  # one rank reports at a time
                if turn == rank:
                    report(f"rank {rank}")
                dist.barrier()
            dist.destroy_process_group()
        """
    )
    tail = {
        "script": '\nif __name__ == "__main__":\n    import torch.multiprocessing as mp\n'
        '    report("script")\n    mp.spawn(main, args=(2,), nprocs=2)\n',
        "worker": "",
        "torchrun": '\nif __name__ == "__main__":\n'
        '    main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))\n',
    }[route]
    script = tmp_path / f"{route}.py"
    script.write_text(REPLACED + body + tail)
    result = doctor.diagnose(script, 2)
    lines = [line for line in result.output.splitlines() if "UNDECLARED" in line]
    assert len(lines) == (3 if route == "script" else 2), str(result) + result.output
    assert all(line.endswith("UNDECLARED []") for line in lines), "\n".join(lines)
