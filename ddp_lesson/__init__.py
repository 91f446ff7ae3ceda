"""Helpers for the ddp-lesson notebooks.

``devices`` (the device policy), ``launch`` (bounded launches around
``mp.spawn``), ``reports`` (what ranks send back), ``data``, ``models``,
``plots``, ``widgets`` (interactive views of real runs), ``checks`` (the
exercises' checks), ``doctor`` (diagnoses a learner's DDP script),
``elastic`` (PyTorch's ``torchrun``, bounded and on 127.0.0.1 only),
``stages`` (the stage workers as the notebooks write them) and
``exercises`` (generates ``exercises/`` from ``solutions/``).

Submodules load on first use, so a rank that only needs ``reports`` does not
pay for importing matplotlib.
"""

import importlib

__all__ = [
    "checks",
    "data",
    "devices",
    "doctor",
    "elastic",
    "exercises",
    "launch",
    "models",
    "plots",
    "reports",
    "stages",
    "widgets",
]


def __getattr__(name: str):
    if name in __all__:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ddp_lesson' has no attribute {name!r}")
