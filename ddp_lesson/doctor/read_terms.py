"""The terms the doctor's static read shares with the probe and the judge.

The calls each stage owns (:data:`STAGE_CALLS`), the collectives every
rank must call, the variables torchrun sets, the addresses that listen on
every network interface, :class:`Finding` (one mistake, as the code or
the run shows it) and :class:`Reading` (what the code of one file says,
which each ``read_*`` module fills in). Nothing here reads code; the reader (:mod:`.read` and
its ``read_*`` modules), :mod:`.probe` and :mod:`.judge` all use these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

#: Collectives: every rank of the group must call each of them, in the same order.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "new_group",  # (every rank of the default group must call it, whatever ranks= says)
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "scatter_object_list",
    }
)

#: The calls that belong to each stage: a line that raises inside one of them
#: is that stage's (the model's forward pass is found separately).
STAGE_CALLS = {
    "spawning": {"spawn", "start_processes"},
    "process_group": {
        "init_process_group",
        "new_group",
        "get_rank",
        "get_world_size",
        "monitored_barrier",
        "TCPStore",
        "init_device_mesh",
        *COLLECTIVES,
    },
    "data_division": {"DataLoader", "DistributedSampler", "set_epoch"},
    "model_wrapping": {
        "DistributedDataParallel",
        "set_device",
        "backward",
        "step",
        "zero_grad",
    },
    "teardown": {"destroy_process_group"},
}

#: Environment variables that torchrun sets for every process it starts.
TORCHRUN_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})

#: Addresses that mean "listen on every network interface".
ALL_INTERFACES = frozenset({"0.0.0.0", "::"})


@dataclass
class Finding:
    """One mistake: the stage it belongs to, what shows it, and the line that owns the fix.

    ``needs`` names what a run must have done to show the mistake (e.g.
    ``"epochs"``: more than one epoch), when a short run may not have.
    """

    stage: str
    evidence: str
    line: int | None
    needs: str = ""


#: How the doctor starts a file (:attr:`Reading.mode`).
SCRIPT, WORKER, TORCHRUN = "script", "worker", "torchrun"


@dataclass
class Reading:
    """What the code of one file says.

    Attributes:
        path: the file.
        problem: set when the file cannot be diagnosed at all (a one-line reason).
        mode: how to start it: ``"script"`` (it has a ``__main__`` block, or
            top-level code that starts processes or joins a group: run it as
            Python, as a whole), ``"torchrun"`` (run as Python, it needed a
            variable torchrun sets before it started any process: the doctor
            then runs it under torchrun) or ``"worker"`` (it only defines
            ``main(rank, world_size, ...)``: the doctor starts the processes
            and calls it).
        reads_torchrun: the code reads the variables torchrun sets (``RANK``,
            ``init_process_group()`` from ``env://``...).
        findings: mistakes the code suggests (the run confirms or not).
        warnings: what is worth knowing though no stage is at fault
            (listening on every network interface, ...).
        lines: the line that owns each stage, where one was found.
        owners: the stage each line belongs to (a call of that stage is on it).
        sources: each line's text, to quote it.
        nprocs: the number of processes ``mp.spawn`` is asked for, when the
            code gives it as a constant.
        hard_nccl: ``init_process_group`` is given the literal backend ``"nccl"``.
        asks_device_count: the code asks how many GPUs there are
            (``torch.cuda.device_count()``, ``torch.accelerator.device_count()``)
            or whether there is an accelerator (``torch.accelerator.is_available()``,
            ``current_accelerator()``).
        gpu_branch: the code asks ``torch.cuda.is_available()``: on a machine
            without a GPU per rank, once the branch the machine takes shows no
            fault, the doctor runs the GPU branch on stand-ins (the run reads
            this flag: while it is set, ``is_available()`` answers True).
        release_on_error: the line of the only place the group is released
            from, when that place runs only after an error (an ``except``
            block, or a function only ``except`` blocks call).
        unstartable: set when the file cannot be run as written (a finding
            says why); the doctor then judges the code without running it.
        agent_line: run as Python, the script started torchrun's agent on
            itself at this line (``torch.distributed.run.main([..., sys.argv[0]])``,
            or ``elastic_launch`` with its own path), or Python on itself with
            torchrun's variables (``subprocess.Popen``; then ``self_subprocess``):
            the doctor then runs it under its torchrun, as for ``"torchrun"``.
        self_subprocess: the launch at ``agent_line`` is ``subprocess``, not torchrun's.
        group_in_dataset: the line where a dataset class with ``__iter__`` asks the
            process group for the rank (``dist.get_rank()``...), which the DataLoader's
            workers run.
        uncalled_test: the first line that names ``torch.cuda.is_available`` (or
            another ``is_...`` test of torch's) without calling it: a function is
            always true.
    """

    path: Path
    problem: str = ""
    mode: str = ""
    findings: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    owners: dict[int, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list, repr=False)
    nprocs: int | None = None
    hard_nccl: bool = False
    asks_device_count: bool = False
    unstartable: bool = False
    reads_torchrun: bool = False
    agent_line: int | None = None
    self_subprocess: bool = False
    group_in_dataset: int | None = None
    gpu_branch: bool = False
    uncalled_test: int | None = None
    release_on_error: int | None = None

    def source(self, line: int | None) -> str:
        """The text of ``line`` (stripped), or ``""``."""
        if line is None or not 0 < line <= len(self.sources):
            return ""
        return self.sources[line - 1].strip()
