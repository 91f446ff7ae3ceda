"""The lesson's model: the small fully connected network built before DDP."""

from __future__ import annotations

import torch
from torch import nn

from .validate import whole_number


class NeuralNetwork(nn.Module):
    """A multilayer perceptron: 64 inputs, two hidden layers of 512, 10 outputs.

    It is the classic PyTorch starter network sized for 8x8 digit images.

    Args:
        in_features: inputs per example (64 pixels).
        hidden: width of each hidden layer.
        classes: number of outputs.

    >>> model = NeuralNetwork()
    >>> model(torch.zeros(5, 64)).shape
    torch.Size([5, 10])
    """

    def __init__(self, in_features: int = 64, hidden: int = 512, classes: int = 10):
        for name, value in (("in_features", in_features), ("hidden", hidden), ("classes", classes)):
            whole_number(name, value, minimum=1)
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_relu_stack(self.flatten(x))


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters of ``model`` (unwrapped from DDP if needed) as one CPU vector.

    >>> flat_parameters(nn.Linear(2, 3)).shape
    torch.Size([9])
    """
    module = getattr(model, "module", model)
    return torch.cat([p.detach().reshape(-1).cpu() for p in module.parameters()])


def flat_gradients(model: nn.Module) -> torch.Tensor:
    """All gradients of ``model`` as one CPU vector (zeros where a gradient is missing)."""
    module = getattr(model, "module", model)
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).cpu()
        for p in module.parameters()
    ]
    return torch.cat(parts)


def buffer_sync(flag: bool) -> dict[str, bool]:
    """DDP's option that copies rank 0's buffers at every forward, spelled as this torch spells it.

    torch 2.13 added ``forward_sync_buffers`` in place of ``broadcast_buffers``;
    an older torch (Colab's, for one) knows only the old name:
    ``DDP(model, **buffer_sync(False))``. The two differ when off: the old
    ``broadcast_buffers=False`` also skips the constructor's broadcast of
    buffers, so each rank starts from its own; ``forward_sync_buffers=False``
    only stops the copy at each forward.

    >>> list(buffer_sync(False).values())
    [False]
    """
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    known = inspect.signature(DistributedDataParallel.__init__).parameters
    name = "forward_sync_buffers" if "forward_sync_buffers" in known else "broadcast_buffers"
    return {name: bool(flag)}
