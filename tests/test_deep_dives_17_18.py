"""The measuring helpers of the deep dives 17 and 18, checked without a launch.

The notebooks run them on real ranks (nbval compares those outputs); these
checks pin what each helper counts, on objects built here.
"""

from __future__ import annotations

import torch

from ddp_lesson.measures import comm_hooks, zero_state
from ddp_lesson.models import NeuralNetwork


def test_counting_adds_the_bytes_of_each_tensor_and_calls_the_function():
    calls = []
    counted = comm_hooks.counting(lambda tensor, *a, **k: calls.append(tensor))
    comm_hooks.sent[0] = 0
    counted(torch.zeros(10, dtype=torch.float32))
    counted(torch.zeros(10, dtype=torch.float16), async_op=True)
    assert comm_hooks.sent[0] == 10 * 4 + 10 * 2
    assert len(calls) == 2


def test_record_notes_the_bytes_of_each_step():
    comm_hooks.steps.clear()
    comm_hooks.losses.clear()
    comm_hooks.sent[0] = 0
    for size in (100, 40):
        comm_hooks.sent[0] += size
        comm_hooks.record(torch.tensor(1.0, requires_grad=True))
    assert comm_hooks.steps == [100, 40]


def test_plain_adam_holds_two_states_per_parameter_and_a_step_count():
    model = NeuralNetwork()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.zeros(2, 64)).sum().backward()
    optimizer.step()
    params = list(model.parameters())
    elements = sum(p.numel() for p in params)
    # exp_avg and exp_avg_sq per element, and one float32 step per tensor
    assert zero_state.state_bytes(optimizer) == 2 * 4 * elements + 4 * len(params)
    assert zero_state.owned(optimizer) == (len(params), elements)
