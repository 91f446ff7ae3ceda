"""The lesson's stages: one table that the notebooks, checks, doctor and views all read.

A DDP script changes a single-device script in four areas, in the order
it runs them, and ends by releasing its process group. Each stage has a
key (what code and the doctor's JSON use), a title (what a learner reads),
the notebook that teaches it, and that notebook's worker file.

>>> [s.title for s in STAGES][:3]
['starting processes', 'connecting processes', 'splitting the data']
>>> stage("data_division").notebook
'04_sampler'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One stage of the lesson.

    Attributes:
        key: a short identifier, e.g. ``"data_division"``.
        title: how a learner reads it, e.g. ``"splitting the data"``.
        notebook: the lesson notebook that teaches it (its stem).
        worker: that notebook's worker file, under ``notebooks/``.
        owner: what owns the stage in a script (where its fixes go).
    """

    key: str
    title: str
    notebook: str
    worker: str
    owner: str


#: The stages in the order a DDP script runs them.
STAGES = (
    Stage("spawning", "starting processes", "02_spawn", "workers/stage_02.py",
          "mp.spawn(main, args=..., nprocs=world_size)"),
    Stage("process_group", "connecting processes", "03_process_group", "workers/stage_03.py",
          "ddp_setup: init_process_group(backend, rank=rank, world_size=world_size)"),
    Stage("data_division", "splitting the data", "04_sampler", "workers/stage_04.py",
          "DataLoader(..., sampler=DistributedSampler(dataset)) and set_epoch"),
    Stage("model_wrapping", "synchronising the model", "05_ddp_wrap", "workers/stage_05.py",
          "model.to(device) then DDP(model, ...)"),
    Stage("teardown", "teardown", "03_process_group", "workers/stage_03.py",
          "destroy_process_group() when training ends"),
)  # fmt: skip

KEYS = tuple(s.key for s in STAGES)


def stage(name: str) -> Stage:
    """The stage with this key or title.

    Raises:
        KeyError: no stage is called that; the message lists the names.
    """
    for s in STAGES:
        if name in (s.key, s.title):
            return s
    raise KeyError(f"no stage {name!r}: use one of {[s.key for s in STAGES]}")
