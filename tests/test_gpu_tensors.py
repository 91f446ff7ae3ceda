"""Stand-in GPU tensors (exercises/probes/gpu_tensors.py): where each tensor would be on GPUs.

The checks' reruns on stand-in GPUs judge an answer by the device of what
it hands to a collective, so the marks must follow torch's own rules: a
tensor is where it was made or sent, a result where its inputs are, and
``.cpu()`` a copy on the CPU that leaves the original on its GPU.
"""

from __future__ import annotations

import torch

from ddp_lesson.exercises.probes.gpu_tensors import StandInGPUs, gpu_of, place


def test_made_or_sent_to_a_gpu_is_marked_and_stays_on_the_cpu():
    with StandInGPUs("cuda:1"):
        made = torch.zeros(2, device="cuda:1")
        current = torch.ones(1, device="cuda")
        sent = torch.tensor([3.0]).to(torch.device("cuda:1"), dtype=torch.float64)
        cuda = torch.tensor(1).cuda()
        plain = torch.tensor([1.0])
    assert [gpu_of(t) for t in (made, current, sent, cuda, plain)] == [
        "cuda:1", "cuda:1", "cuda:1", "cuda:1", None,
    ]  # fmt: skip
    assert made.device.type == "cpu" and sent.dtype == torch.float64


def test_a_result_is_where_its_inputs_are_and_cpu_gives_a_copy():
    with StandInGPUs("cuda:0"):
        on_gpu = torch.ones(3, device="cuda:0")
        total = torch.stack([on_gpu.sum(), torch.tensor(2.0)]) * 2
        back = on_gpu.cpu()
        beside = torch.zeros(1, device=on_gpu.device)
        asked = (on_gpu.device, on_gpu.is_cuda, on_gpu.get_device(), back.is_cuda)
    assert gpu_of(total) == "cuda:0" and gpu_of(beside) == "cuda:0"
    assert gpu_of(back) is None and gpu_of(on_gpu) == "cuda:0" and back is not on_gpu
    assert asked == (torch.device("cuda:0"), True, 0, False)


def test_a_model_placed_on_a_gpu_gives_gpu_outputs():
    model = torch.nn.Linear(3, 2)
    place(model.parameters(), "cuda:1")
    with StandInGPUs("cuda:1"):
        out = model(torch.randn(4, 3).to("cuda:1")).argmax(dim=1)
        counts = (out == torch.zeros(4, dtype=torch.long)).sum()
    assert gpu_of(out) == "cuda:1" and gpu_of(counts) == "cuda:1"
