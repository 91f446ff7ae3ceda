"""Real multi-process launches through ddp_lesson.launch: the healthy path.

Each test starts real gloo processes with mp.spawn, exactly as the notebooks
do, and checks what the learner would see: the ranks' reports, the message
when something goes wrong, the time bound, and that nothing is left behind.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch.multiprocessing as mp
from launch_workers import faulty, healthy

from ddp_lesson import launch
from ddp_lesson.launch import processes

pytestmark = pytest.mark.usefixtures("no_leftovers")


def port_is_listening(port: int) -> bool:
    return any(
        c.laddr.port == port and c.status == psutil.CONN_LISTEN
        for c in psutil.net_connections("inet")
    )


def test_healthy_launch_reports_every_rank_and_cleans_up():
    with launch.bounded(2, timeout_s=60) as run:
        assert port_is_listening(run.port)
        mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
    assert [r["rank"] for r in run.reports] == [0, 1]
    assert [r["total"] for r in run.reports] == [1.0, 1.0]  # 0 + 1 on both ranks
    assert len({r["pid"] for r in run.reports}) == 2
    assert run.started == 2
    # a worker's own `from torch.distributed import destroy_process_group` gets the
    # version that lets gloo's threads finish before the group can be freed
    assert all(r["destroy_pauses"] for r in run.reports)
    assert not port_is_listening(run.port)


def test_ranks_listen_on_loopback_only():
    with launch.bounded(2, timeout_s=60) as run:
        mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
    addresses = {ip for r in run.reports for ip in r["listening"]}
    assert addresses, "the ranks should have seen the group's listening sockets"
    assert addresses <= {"127.0.0.1"}, addresses


def test_threads_per_rank_share_the_cores():
    with launch.bounded(2, timeout_s=60, threads_per_rank=1) as run:
        mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
    assert [r["threads"] for r in run.reports] == [1, 1]


def test_environment_is_restored_after_a_launch():
    before = dict(os.environ)
    with launch.bounded(2, timeout_s=60) as run:
        mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
    assert dict(os.environ) == before


def test_what_ranks_print_is_shown_after_the_launch(capfd):
    with launch.bounded(2, timeout_s=60) as run:
        mp.spawn(faulty.prints, args=(2, run.port), nprocs=2)
    assert "hello from rank 0" in run.output and "hello from rank 1" in run.output
    shown = capfd.readouterr().out
    assert shown.startswith("What the ranks printed:")


def test_two_notebooks_launching_at_once_do_not_clash(tmp_path):
    # Two kernels are two processes: run two scripts that launch at the same time.
    script = tmp_path / "notebook.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import torch.multiprocessing as mp\n"
        "from launch_workers import healthy\n"
        "from ddp_lesson import launch\n"
        "if __name__ == '__main__':\n"
        "    with launch.bounded(2, timeout_s=60) as run:\n"
        "        mp.spawn(healthy.main, args=(2, run.port), nprocs=2)\n"
        "    print(run.port, [r['total'] for r in run.reports])\n"
    )
    outputs: list[str] = []
    threads = [
        threading.Thread(target=lambda: outputs.append(launch.run_script(script, timeout_s=120)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outputs) == 2, "one of the two launches failed"
    ports = {line.split()[0] for line in outputs}
    assert len(ports) == 2
    assert all(line.strip().endswith("[1.0, 1.0]") for line in outputs)


def test_run_script_returns_output_and_bounds_time(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    assert launch.run_script(script, timeout_s=60).strip() == "hello"

    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    started = time.monotonic()
    with pytest.raises(launch.LaunchTimeout):
        launch.run_script(slow, timeout_s=2)
    assert time.monotonic() - started < 10

    failing = tmp_path / "failing.py"
    failing.write_text("raise SystemExit('bad input: use --epochs 2')\n")
    with pytest.raises(launch.LaunchError, match=r"(?s)exited with code 1.*bad input"):
        launch.run_script(failing, timeout_s=60)

    with pytest.raises(FileNotFoundError, match="run the %%writefile cell"):
        launch.run_script(tmp_path / "missing.py")


def test_a_script_and_the_ranks_it_spawns_run_as_python_runs_them_with_the_pause(tmp_path):
    # run_script starts the script through launch/script_main.py: it must see what
    # `python FILE ARGS` gives, and its mp.spawn ranks, forked from a warm server,
    # must be what spawn makes (the script imported again as __mp_main__, the
    # environment of the call) and get the teardown pause too
    script = tmp_path / "spawning.py"
    script.write_text(
        "import os, signal, sys\n"
        "import torch.multiprocessing as mp\n"
        "from torch.distributed import destroy_process_group\n\n"
        "if __name__ == '__mp_main__':\n"
        "    print('imported again', flush=True)\n\n\n"
        "def main(rank, word):\n"  # the name bound when the rank imported this file, as __mp_main__
        "    pauses = destroy_process_group.__code__.co_name == 'pausing'\n"
        "    warm, sees = 'ddp_lesson.warm' in sys.modules, os.environ.get('SET_BY_SCRIPT')\n"
        "    default = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL\n"
        "    # one string: unbuffered (run_script), the ranks' print() pieces could interleave\n"
        "    print(f'rank {rank} pauses {pauses} warm {warm} sees {sees} says {word} '\n"
        "          f'sigterm {default}', flush=True)\n\n\n"
        "if __name__ == '__main__':\n"
        "    print('name', __name__, 'argv', sys.argv[1:], 'first', sys.path[0] == "
        f"{str(tmp_path)!r})\n"
        "    pauses = destroy_process_group.__code__.co_name == 'pausing'\n"
        "    print('script pauses', pauses, flush=True)\n"
        "    os.environ['SET_BY_SCRIPT'] = 'yes'\n"
        "    mp.spawn(main, args=('hello',), nprocs=2)\n"
    )
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    said = launch.run_script(script, "--epochs", "2", timeout_s=120)
    assert "name __main__ argv ['--epochs', '2'] first True" in said
    assert "script pauses True" in said
    assert said.count("imported again") == 2, said
    for rank in (0, 1):
        assert f"rank {rank} pauses True warm True sees yes says hello sigterm True" in said, said
    # the script's own resource tracker and warm server, adopted here when the script
    # ended, were waited for and collected: neither a process nor a zombie stays behind
    from ddp_lesson.launch import processes

    kids = psutil.Process().children(recursive=True)
    assert [p.pid for p in kids if p.pid not in before and not processes.is_helper(p)] == []


def test_warm_start_runs_the_same_ranks_with_the_launchs_environment(capfd):
    with launch.bounded(2, timeout_s=60, threads_per_rank=2) as run:
        launch.start(healthy.main, args=(2, run.port), nprocs=2)
    with launch.bounded(2, timeout_s=60) as printed:
        launch.start(faulty.prints, args=(2, printed.port), nprocs=2)
    # the reports arrive: the ranks had this launch's report folder and store variables
    assert [r["total"] for r in run.reports] == [1.0, 1.0]
    assert [r["threads"] for r in run.reports] == [2, 2]  # the launch's count, not the server's
    assert len({r["pid"] for r in run.reports}) == 2
    assert all(set(r["listening"]) <= {"127.0.0.1"} for r in run.reports)
    # the collector runs in every rank; the server's imports are frozen, not rescanned
    assert all(r["collecting"] for r in run.reports)
    assert all(r["frozen"] > 100_000 for r in run.reports), [r["frozen"] for r in run.reports]
    # what forked ranks print reaches the launch's output, not the server's terminal
    assert "hello from rank 0" in printed.output and "hello from rank 1" in printed.output
    assert "hello from rank" in capfd.readouterr().out  # shown after the launch


def test_warm_start_is_refused_outside_a_launch():
    with pytest.raises(RuntimeError, match=r"inside `with launch.bounded"):
        launch.start(healthy.main, args=(2, 0), nprocs=2)


def test_a_warm_launch_is_quicker_than_a_cold_one():
    def once(warm: bool) -> float:
        started = time.monotonic()
        with launch.bounded(2, timeout_s=60, warm=warm) as run:
            mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
        return time.monotonic() - started

    once(True)  # the server's own start, once per process
    cold, warm = once(False), once(True)
    assert warm < cold, (warm, cold)


def test_warm_ranks_that_finish_at_once_are_still_counted():
    # forked ranks can come and go between two looks of the launch's watcher, which
    # then never sees them: the count comes from the pids the ranks started with
    for _ in range(5):
        with launch.bounded(2, timeout_s=60) as run:
            launch.start(faulty.prints, args=(2, run.port), nprocs=2)
        assert run.started == 2


def test_processes_a_rank_starts_are_stopped_but_not_counted_as_ranks():
    # "Only N process(es) were started for a world of W" counts ranks; the launch's
    # watcher sees each rank's own child, and stops it with the rest
    with launch.bounded(2, timeout_s=60) as run:
        launch.start(faulty.starts_a_child, args=(2, run.port), nprocs=2)
    children = [r["child"] for r in run.reports]
    assert len(set(children)) == 2
    assert not any(processes.alive(pid) for pid in children)
    assert run.started == 2


def test_a_script_in_a_temporary_folder_too_deep_for_a_socket_still_runs(tmp_path, deep_tempdir):
    # the warm server's socket lies in the temporary folder; past the length a Unix
    # socket's path may have (108 bytes on Linux), ranks start fresh instead of failing
    script = tmp_path / "spawning.py"
    script.write_text(
        "import sys\n"
        "import torch.multiprocessing as mp\n"
        "from ddp_lesson import launch\n\n\n"
        "def main(rank):\n"
        "    print(f'rank {rank} ran', flush=True)\n\n\n"
        "def plain(rank):\n"
        "    print(f'rank {rank} plain', 'warm' if 'ddp_lesson.warm' in sys.modules else 'fresh',"
        " flush=True)\n\n\n"
        "if __name__ == '__main__':\n"
        "    with launch.bounded(2, timeout_s=60):  # as 06's stage_06.py does\n"
        "        mp.spawn(main, nprocs=2)\n"
        "    mp.spawn(plain, nprocs=1)  # as 06's ddp_train.py does (one fresh start is enough)\n"
    )
    said = launch.run_script(script, timeout_s=120)
    assert "rank 0 ran" in said and "rank 1 ran" in said, said
    assert "rank 0 plain fresh" in said, said
