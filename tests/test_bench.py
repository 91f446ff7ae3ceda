"""The measurement code behind `make bench` and notebook 10, run small and for real.

No test here asserts how long anything took: these machines are shared and
noisy. They check that the numbers come from real launches, have the
structure the tables and pictures need, and are consistent with each other.
"""

import contextlib
import subprocess
import sys

import psutil
import pytest
import torch
from waiting import wait_until

from ddp_lesson import bench, data, launch
from ddp_lesson.views import plots


def test_digits_shifted_is_nine_labelled_copies_of_the_digits():
    train = data.digits("train")
    shifted = data.digits_shifted("train")
    features, labels = shifted.tensors
    assert len(shifted) == 9 * len(train)
    assert torch.equal(labels, train.tensors[1].repeat(9))
    assert torch.equal(features[: len(train)], train.tensors[0])
    # each copy moves the image by one pixel: no pixel value is invented
    assert features.min() >= 0 and features.max() <= 1
    assert len({tuple(features[i * len(train)].tolist()) for i in range(9)}) == 9


def test_trial_labels_name_what_differs_from_the_default():
    assert bench.Trial().label == "batch 1024"
    trial = bench.Trial(256, bucket_cap_mb=0.25, bucket_view=True, sync_every=4)
    assert trial.label == "batch 256, bucket 0.25 MB, bucket view, sync every 4"
    assert bench.Trial(64, data="digits").label == "batch 64, digits"


def test_speedups_divide_by_the_baseline_of_the_same_trial():
    rows = [
        {"setup": "one", "trial": "a", "world_size": 1, "samples_per_s": 10.0},
        {"setup": "one", "trial": "b", "world_size": 1, "samples_per_s": 20.0},
        {"setup": "two", "trial": "a", "world_size": 2, "samples_per_s": 15.0},
        {"setup": "two", "trial": "b", "world_size": 2, "samples_per_s": 40.0},
    ]
    out = {(r["setup"], r["trial"]): r for r in bench.speedups(rows, "one")}
    assert out[("two", "a")]["speedup"] == pytest.approx(1.5)
    assert out[("two", "b")]["efficiency"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="choose one of"):
        bench.speedups(rows, "three")


def test_summarise_needs_values():
    with pytest.raises(ValueError, match="at least one value"):
        bench.summarise([])


def test_a_batch_that_does_not_split_over_the_ranks_is_refused():
    setup = bench.Setup("DDP world 2", 2, 1)
    with pytest.raises(ValueError, match="multiple of the world size"):
        bench.training([setup], [bench.Trial(33)])


def test_unknown_data_is_refused_before_any_launch():
    with pytest.raises(ValueError, match="'digits' or 'digits_shifted'"):
        bench.training([bench.Setup("one", 1, 1)], [bench.Trial(64, data="mnist")])


def test_a_batch_larger_than_the_data_set_is_named_by_the_rank(no_leftovers):
    setup = bench.Setup("one process", 1, 1, ddp=False)
    with pytest.raises(launch.LaunchError, match="more than the 1438 examples"):
        bench.training([setup], [bench.Trial(4096, data="digits")], repeats=1, timeout_s=60)


def _consistent(row):
    assert 0 < row["min"] <= row["samples_per_s"] <= row["max"]
    assert row["step_ms"] > 0


def test_training_times_real_launches_of_every_setup(no_leftovers):
    setups = [bench.Setup("one process", 1, 1, ddp=False), bench.Setup("DDP world 2", 2, 1)]
    trials = [bench.Trial(64), bench.Trial(64, sync_every=2), bench.Trial(64, bucket_view=True)]
    rows = bench.training(setups, trials, repeats=1, windows=2, window_s=0.05, timeout_s=120)
    assert [(r["setup"], r["trial"]) for r in rows] == [
        (s.label, t.label) for s in setups for t in trials
    ]
    for row in rows:
        _consistent(row)
        assert row["windows"] == 2
        assert row["threads"] == 1  # what the ranks reported, as the setup asked
    ratios = bench.speedups(rows, "one process")
    assert {r["speedup"] for r in ratios if r["setup"] == "one process"} == {1.0}
    assert all(r["speedup"] > 0 for r in ratios)


def test_allreduce_rows_are_ordered_by_size_and_consistent(no_leftovers):
    rows = bench.allreduce([4096, 262144], world_size=2, repeats=3, timeout_s=120)
    assert [r["size"] for r in rows] == ["4 KB", "256 KB"]
    for row in rows:
        assert 0 < row["min_ms"] <= row["ms"] <= row["max_ms"]
        # the rate a call reaches at its cost, the minimum time
        assert row["MB_per_s"] == pytest.approx(row["bytes"] / 1e6 / (row["min_ms"] / 1000))


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "forked"])
def test_startup_stages_add_up_to_the_whole_launch(no_leftovers, warm):
    rows = bench.startup(2, repeats=1, timeout_s=120, warm=warm)
    assert [r["stage"] for r in rows] == [*bench.PHASES, "total"]
    stages, total = rows[:-1], rows[-1]
    # one launch: the median is the value; the stages share their boundaries
    assert sum(r["median"] for r in stages) == pytest.approx(total["median"])
    assert all(r["median"] >= 0 for r in stages)


def test_pictures_draw_what_they_are_given():
    rows = [
        {"setup": s, "batch": b, "samples_per_s": v, "min": v - 1, "max": v + 1}
        for s, v in (("DDP world 1", 10.0), ("DDP world 2", 18.0))
        for b in (64, 256)
    ]
    fig = plots.throughput_picture(rows)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "DDP world 1",
        "DDP world 2",
    ]
    wires = [
        {"bytes": 4096, "size": "4 KB", "ms": 0.1, "min_ms": 0.05, "max_ms": 0.2},
        {"bytes": 65536, "size": "64 KB", "ms": 0.3, "min_ms": 0.2, "max_ms": 0.5},
    ]
    assert len(plots.allreduce_picture(wires).axes) == 1
    stages = [{"stage": s, "median": 1.0, "min": 0.5, "max": 2.0} for s in bench.PHASES]
    labels = [t.get_text() for t in plots.startup_picture(stages).axes[0].get_yticklabels()]
    assert labels == list(bench.PHASES)


def test_a_failing_launch_still_leaves_nothing_running(no_leftovers):
    setup = bench.Setup("DDP world 2", 2, 1)
    with pytest.raises(launch.LaunchTimeout):
        # windows far longer than the deadline: stopped, not hung
        bench.training([setup], [bench.Trial(4096)], window_s=1000, timeout_s=5)


def test_scaling_compares_world_n_with_world_one_and_with_ranks_alone(no_leftovers):
    rows = bench.scaling([128, 256], window_s=0.05, windows=1, repeats=1)
    assert [r["batch"] for r in rows] == [128, 256]
    for row in rows:
        n = row["world_size"]
        assert row["speedup"] == pytest.approx(row["worldN"] / row["world1"])
        assert row["ddp_efficiency"] == pytest.approx(row["worldN"] / (n * row["alone"]))
        assert row["ceiling"] == pytest.approx(n * row["alone"] / row["world1"])
        for key in ("world1", "worldN", "alone"):
            assert 0 < row[f"{key}_min"] <= row[key] <= row[f"{key}_max"]


def test_one_rank_alone_trains_on_its_share_of_the_global_batch():
    alone = bench.Setup("one rank alone", 1, 1, share=2)
    assert alone.trial(bench.Trial(1024)).batch == 512
    assert bench.Setup("world 2", 2, 1).trial(bench.Trial(1024)).batch == 1024


def test_unsteady_rows_are_named():
    rows = [{"v": 10.0, "min": 9.5, "max": 10.5}, {"v": 10.0, "min": 4.0, "max": 16.0}]
    assert bench.unsteady(rows, "v") == [rows[1]]


#: Keeps one core busy for a second of its own CPU time, however loaded the machine is.
HOG = "import time\nend = time.process_time() + 1\nwhile time.process_time() < end:\n    pass\n"


def test_the_measurements_own_processes_do_not_count_as_a_busy_machine():
    # two ranks measuring on two cores are a load of 2: a busy machine by the
    # load average, though nothing else runs. What the measurement itself
    # starts (here a child keeping a core busy) is its own work.
    others = bench.Others()
    subprocess.run([sys.executable, "-c", HOG], check=True)
    assert others.own_s() >= 1.0


def test_a_process_outside_the_measurement_makes_the_machine_busy(monkeypatch):
    others = bench.Others()
    # a hog adopted by the system when its parent leaves, as any other program's
    start = f"import subprocess, sys\nprint(subprocess.Popen([sys.executable, '-c', {HOG!r}]).pid)"
    pid = int(subprocess.run([sys.executable, "-c", start], capture_output=True, text=True,
                             check=True).stdout)  # fmt: skip

    def ended() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(ended, 120, "the busy process (one CPU-second of work) to end")
    assert others.others_s() >= 0.9, others.others_s()  # its second, less clock rounding
    assert 0 < others.share() <= 1
    monkeypatch.setattr(bench.conditions, "OTHERS_MAX", 0.0)
    assert "other processes kept" in bench.busy(others)
    monkeypatch.setattr(bench.conditions, "OTHERS_MAX", 1.0)
    assert bench.busy(others) == ""


def test_stage_launches_run_each_lesson_stage_as_its_notebook_does(no_leftovers):
    rows = bench.stage_launches(["03", "05"], repeats=1)
    assert [r["stage"] for r in rows] == ["03", "05"]
    assert all(0 < r["min"] <= r["median"] <= r["max"] for r in rows)


def test_stage_launches_set_aside_a_workers_package_imported_before(tmp_path, monkeypatch):
    # a kernel that imported its own `workers` package (as the notebooks' folder has)
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    import workers

    try:
        rows = bench.stage_launches(["02"], repeats=1)
        assert [r["stage"] for r in rows] == ["02"]
        assert sys.modules["workers"] is workers  # put back as it was
    finally:
        del sys.modules["workers"]


def test_first_launch_times_a_new_process_run_under_the_launch(no_leftovers):
    row = bench.first_launch("05", repeats=1, timeout_s=300)
    assert 0 < row["min"] == row["median"] == row["max"]


def _notebook(path, *cells):
    import nbformat

    cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)


def test_notebook_times_execute_each_notebook_in_its_own_folder(tmp_path, no_leftovers):
    _notebook(tmp_path / "tiny.ipynb", "import os\nopen('ran_in.txt', 'w').write(os.getcwd())")
    rows = bench.notebook_times([tmp_path / "tiny.ipynb"], timeout_s=120)
    assert [r["notebook"] for r in rows] == ["tiny"] and rows[0]["seconds"] > 0
    assert (tmp_path / "ran_in.txt").read_text() == str(tmp_path)


def test_a_notebook_past_its_deadline_is_stopped_with_its_kernel_and_processes(
    tmp_path, no_leftovers
):
    _notebook(
        tmp_path / "slow.ipynb",
        "import subprocess, time\nchild = subprocess.Popen(['sleep', '300'])\n"
        "open('child.pid', 'w').write(str(child.pid))\ntime.sleep(300)",
    )
    with pytest.raises(launch.LaunchTimeout, match="slow.ipynb did not finish within 15 s"):
        launch.execute_notebook(tmp_path / "slow.ipynb", timeout_s=15)
    child = tmp_path / "child.pid"  # there if the kernel reached the cell before the deadline
    if child.exists():
        with contextlib.suppress(psutil.NoSuchProcess):
            assert psutil.Process(int(child.read_text())).status() == psutil.STATUS_ZOMBIE


def test_a_failing_cell_is_named_with_its_error(tmp_path, no_leftovers):
    _notebook(tmp_path / "bad.ipynb", "1 / 0")
    with pytest.raises(launch.LaunchError, match="ZeroDivisionError"):
        launch.execute_notebook(tmp_path / "bad.ipynb", timeout_s=120)
