"""The device policy: what a launch on this machine looks like."""

import pytest
import torch

from ddp_lesson import devices


def test_cpu_machine_plans_two_gloo_processes(monkeypatch):
    monkeypatch.delenv(devices.WORLD_SIZE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    plan = devices.plan()
    assert (plan.backend, plan.device_type, plan.world_size) == ("gloo", "cpu", 2)
    assert [str(plan.device(r)) for r in range(2)] == ["cpu", "cpu"]
    assert "torch.cuda.device_count(): 0" in plan.describe()


def test_gpu_machine_plans_one_nccl_process_per_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    plan = devices.plan()
    assert (plan.backend, plan.device_type, plan.world_size) == ("nccl", "cuda", 4)
    assert [str(plan.device(r)) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]


def test_world_size_from_the_environment(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv(devices.WORLD_SIZE_ENV, "3")
    assert devices.plan().world_size == 3
    monkeypatch.setenv(devices.WORLD_SIZE_ENV, "two")
    with pytest.raises(
        ValueError, match=r"DDP_LESSON_WORLD_SIZE must be a whole number, got 'two'"
    ):
        devices.plan()


def test_zero_world_size_explains_the_silent_no_op():
    with pytest.raises(ValueError) as caught:
        devices.check_world_size(0, gpus=0, cores=2)
    message = str(caught.value)
    assert "torch.cuda.device_count() is 0" in message
    assert "pass world_size=2" in message


def test_more_ranks_than_gpus_is_refused():
    with pytest.raises(ValueError, match="more processes than GPUs: this machine has 2"):
        devices.check_world_size(3, gpus=2, cores=16)


@pytest.mark.parametrize("bad", [True, 2.5, "2", None])
def test_world_size_must_be_an_int(bad):
    with pytest.raises(TypeError, match="whole number"):
        devices.check_world_size(bad, gpus=0, cores=2)


def test_threads_per_rank_never_oversubscribes():
    for cores in (1, 2, 3, 8):
        for world_size in (1, 2, 3, 4):
            threads = devices.threads_per_rank(world_size, cores)
            assert threads >= 1
            assert threads * world_size <= max(cores, world_size)


def test_ddp_device_ids_follow_the_device():
    assert devices.ddp_device_ids(torch.device("cpu")) is None
    assert devices.ddp_device_ids(devices.device_for(2, "cuda")) == [2]
