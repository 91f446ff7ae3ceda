"""The lesson's data set, the sampler helpers and the model."""

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson import data, models


def test_digits_are_scikit_learns_digits():
    from sklearn.datasets import load_digits

    raw = load_digits()
    train, test = data.digits("train"), data.digits("test")
    assert len(train) + len(test) == len(raw.target) == 1797
    features = torch.cat([train.tensors[0], test.tensors[0]]) * 16
    expected = torch.tensor(raw.data, dtype=torch.float32)
    # the same images, split without overlap
    assert sorted(map(tuple, features.tolist())) == sorted(map(tuple, expected.tolist()))


def test_digits_split_is_the_same_every_time():
    assert torch.equal(data.digits("test").tensors[1], data.digits("test").tensors[1])
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        data.digits("validation")


@pytest.mark.parametrize("size", [1, 7, 10, 11])
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_partition_is_the_real_sampler(size, world_size, drop_last):
    if drop_last and size < world_size:  # every rank would get nothing: refused
        with pytest.raises(ValueError, match="leaves every rank"):
            data.sampler_partition(size, world_size, drop_last=True)
        return
    got = data.sampler_partition(size, world_size, epoch=2, seed=5, drop_last=drop_last)
    dataset = data.numbered(size)
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, seed=5, drop_last=drop_last
        )
        sampler.set_epoch(2)
        assert got[rank] == list(sampler)


def test_padding_and_dropping_are_found():
    padded = data.sampler_partition(11, 2, shuffle=False)
    assert data.padding_of(padded, 11) == {"repeated": [0], "dropped": []}
    trimmed = data.sampler_partition(11, 2, shuffle=False, drop_last=True)
    assert data.padding_of(trimmed, 11) == {"repeated": [], "dropped": [10]}


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4"])
def test_numbered_refuses_bad_sizes(bad):
    with pytest.raises((ValueError, TypeError), match="size must be a whole number >= 1"):
        data.numbered(bad)


def test_flat_parameters_and_gradients():
    torch.manual_seed(0)
    model = models.NeuralNetwork()
    n = sum(p.numel() for p in model.parameters())
    assert models.flat_parameters(model).shape == (n,)
    assert models.flat_gradients(model).abs().sum() == 0  # no backward yet
    model(torch.rand(4, 64)).sum().backward()
    assert models.flat_gradients(model).abs().sum() > 0


def test_buffer_sync_uses_the_name_this_torch_knows(monkeypatch):
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    current = inspect.signature(DistributedDataParallel.__init__).parameters
    expected = "forward_sync_buffers" if "forward_sync_buffers" in current else "broadcast_buffers"
    assert models.buffer_sync(True) == {expected: True}

    def older(self, module, device_ids=None, broadcast_buffers=True):  # torch before 2.13
        raise AssertionError("never called")

    monkeypatch.setattr(DistributedDataParallel, "__init__", older)
    assert models.buffer_sync(False) == {"broadcast_buffers": False}
