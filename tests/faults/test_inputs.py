"""Bad input to any public helper gets a clear TypeError or ValueError, not a deep traceback."""

from __future__ import annotations

import pytest
import torch

from ddp_lesson import data, devices, launch, models, reports
from ddp_lesson.views import plots

CASES = [
    # (call, error, words the message must contain)
    (lambda: data.numbered(0), ValueError, "size must be a whole number >= 1"),
    (lambda: data.numbered("10"), TypeError, "size must be a whole number"),
    (lambda: data.digits("validation"), ValueError, "split must be 'train' or 'test'"),
    (lambda: data.sampler_partition(0, 2), ValueError, "size must be a whole number >= 1"),
    (lambda: data.sampler_partition(10, 0), ValueError, "world_size must be a whole number >= 1"),
    (lambda: data.sampler_partition(10, 2, epoch=-1), ValueError, "epoch must be"),
    (lambda: data.sampler_partition(10, 2, seed=-3), ValueError, "seed must be"),
    (lambda: data.sampler_partition(10, 2, seed=1.5), TypeError, "seed must be"),
    (lambda: data.sampler_partition(10, 2, shuffle="yes"), TypeError, "shuffle must be True"),
    (lambda: data.sampler_partition(1, 2, drop_last=True), ValueError, "leaves every rank"),
    (lambda: devices.device_for(-1, 2), ValueError, "rank must be"),
    (lambda: devices.device_for(2, 2), ValueError, "rank must be below world_size"),
    (lambda: launch.bounded(2, timeout_s=float("nan")), ValueError, "finite number of seconds"),
    (lambda: launch.bounded(2, timeout_s=float("inf")), ValueError, "finite number of seconds"),
    (lambda: launch.bounded(2, timeout_s="10"), TypeError, "number of seconds"),
    (lambda: devices.check_world_size(0, gpus=0, cores=2), ValueError, "silently starts nothing"),
    (lambda: devices.check_world_size(1.5, gpus=0, cores=2), TypeError, "whole number"),
    (lambda: launch.bounded(2, timeout_s=-1), ValueError, "timeout_s must be a positive"),
    (lambda: launch.bounded(2, threads_per_rank=0), ValueError, "threads_per_rank must be"),
    (lambda: launch.run_script("no_such_worker.py"), FileNotFoundError, "%%writefile"),
    (lambda: reports.table("rank", ["rank"]), TypeError, "rows must be a list of dicts"),
    (lambda: reports.table([{"rank": 0}], "rank"), TypeError, "columns must be a non-empty"),
    (lambda: reports.table([{"rank": 0}], []), TypeError, "columns must be a non-empty"),
    (lambda: reports.send_report(-1), ValueError, "rank must be"),
    (
        lambda: reports.max_abs_difference([torch.zeros(2), torch.zeros(3)]),
        ValueError,
        "same shape",
    ),
    (lambda: models.NeuralNetwork(hidden=0), ValueError, "hidden must be"),
    (lambda: plots.partition_picture([[0, 9]], 5), ValueError, "from 0 to 4, got [9]"),
    (lambda: plots.partition_picture([], 5), ValueError, "one list of indices per rank"),
    (lambda: plots.partition_picture([[0]], 0), ValueError, "size must be"),
    (lambda: plots.loss_curves([{"rank": 0}]), ValueError, "these ranks lack them: [0]"),
    (lambda: plots.gradient_picture([]), ValueError, "every report needs"),
]


@pytest.mark.parametrize(("call", "error", "words"), CASES)
def test_bad_input_is_explained(call, error, words):
    with pytest.raises(error) as caught:
        call()
    assert words in str(caught.value)
