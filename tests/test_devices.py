"""The device policy: what a launch looks like on every machine shape."""

import pytest
import torch

from ddp_lesson import devices


@pytest.fixture(autouse=True)
def no_world_size_setting(monkeypatch):
    monkeypatch.delenv(devices.WORLD_SIZE_ENV, raising=False)


def test_cpu_machine_plans_two_gloo_processes():
    plan = devices.plan(gpus=0, cores=2)
    assert (plan.backend, plan.device_type, plan.world_size) == ("gloo", "cpu", 2)
    assert [str(plan.device(r)) for r in range(2)] == ["cpu", "cpu"]
    assert "torch.cuda.device_count(): 0" in plan.describe()
    assert "no CUDA GPU" in plan.reason


def test_one_gpu_still_shows_ddp_with_two_cpu_ranks_and_says_why():
    plan = devices.plan(gpus=1, cores=4)
    assert (plan.backend, plan.device_type, plan.world_size) == ("gloo", "cpu", 2)
    assert "NCCL needs a GPU of its own for every rank" in plan.reason
    assert "one process alone" in plan.reason
    assert devices.device_for(1, 2, gpus=1) == torch.device("cpu")
    assert devices.device_for(0, 1, gpus=1) == torch.device("cuda", 0)  # a world of one fits


@pytest.mark.parametrize("gpus", [2, 8])
def test_gpu_machine_plans_one_nccl_process_per_gpu(gpus):
    plan = devices.plan(gpus=gpus, cores=16)
    assert (plan.backend, plan.device_type, plan.world_size) == ("nccl", "cuda", gpus)
    assert [str(plan.device(r)) for r in range(gpus)] == [f"cuda:{r}" for r in range(gpus)]
    assert [str(devices.device_for(r, gpus, gpus=gpus)) for r in range(gpus)] == [
        f"cuda:{r}" for r in range(gpus)
    ]


def test_more_ranks_than_gpus_run_on_the_cpu_with_the_reason(monkeypatch):
    monkeypatch.setenv(devices.WORLD_SIZE_ENV, "4")
    plan = devices.plan(gpus=2, cores=8)
    assert (plan.backend, plan.world_size) == ("gloo", 4)
    assert "ask for 2 or fewer to use the GPUs" in plan.reason
    assert devices.check_world_size(3, gpus=2, cores=16) == 3  # any world size runs


def test_the_plan_follows_the_real_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert devices.plan().world_size == 4
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert devices.plan().backend == "gloo"


def test_world_size_from_the_environment(monkeypatch):
    monkeypatch.setenv(devices.WORLD_SIZE_ENV, "3")
    assert devices.plan(gpus=0, cores=2).world_size == 3


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("two", "$DDP_LESSON_WORLD_SIZE must be a whole number, got 'two'"),
        ("0", "$DDP_LESSON_WORLD_SIZE must be >= 1, got 0"),
        ("64", "$DDP_LESSON_WORLD_SIZE=64 is more CPU processes than this machine"),
    ],
)
def test_a_bad_world_size_setting_warns_names_the_variable_and_falls_back(
    monkeypatch, value, words
):
    monkeypatch.setenv(devices.WORLD_SIZE_ENV, value)
    with pytest.warns(UserWarning, match=words.replace("$", r"\$")) as caught:
        plan = devices.plan(gpus=0, cores=2)
    assert plan.world_size == devices.DEFAULT_CPU_WORLD_SIZE
    assert "set DDP_LESSON_WORLD_SIZE=2 (or unset it)" in str(caught[0].message)


def test_zero_world_size_explains_the_silent_no_op():
    with pytest.raises(ValueError) as caught:
        devices.check_world_size(0, gpus=0, cores=2)
    message = str(caught.value)
    assert "torch.cuda.device_count() is 0" in message
    assert "pass world_size=2" in message


@pytest.mark.parametrize("bad", [True, 2.5, "2", None])
def test_world_size_must_be_an_int(bad):
    with pytest.raises(TypeError, match="whole number"):
        devices.check_world_size(bad, gpus=0, cores=2)


def test_a_world_of_one_says_that_every_comparison_is_trivial():
    assert "trivially equal" in devices.plan(1, gpus=0, cores=2).describe()
    assert "trivially" not in devices.plan(2, gpus=0, cores=2).describe()


def test_threads_per_rank_never_oversubscribes():
    for cores in (1, 2, 3, 8):
        for world_size in (1, 2, 3, 4):
            threads = devices.threads_per_rank(world_size, cores)
            assert threads >= 1
            assert threads * world_size <= max(cores, world_size)


def test_the_course_uses_one_thread_per_rank_on_every_machine():
    for cores in (1, 2, 16):
        assert devices.plan(2, gpus=0, cores=cores).threads_per_rank == 1


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2: 1.5 cores -> 2
        ({"cpu.max": "100000 100000\n"}, 1),
        ({"cpu.max": "max 100000\n"}, None),  # no quota
        ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),  # no cgroup files at all (macOS)
    ],
)
def test_usable_cores_respects_a_container_cpu_quota(tmp_path, files, cores):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    unlimited = devices.usable_cores(root=tmp_path / "nowhere")
    expected = unlimited if cores is None else min(unlimited, cores)
    assert devices.usable_cores(root=tmp_path) == expected


def test_ddp_device_ids_follow_the_device():
    assert devices.ddp_device_ids(torch.device("cpu")) is None
    assert devices.ddp_device_ids(devices.device_for(2, 4, gpus=4)) == [2]
