"""What each process of a diagnosed run records: one typed record, written and read.

The probe (:mod:`ddp_lesson.doctor.probe`) fills one :class:`ProcessRecord`
per process and sends it after every event, so a process that hangs or
dies still leaves its evidence; the judge (:mod:`ddp_lesson.doctor.judge`)
reads the records by attribute. Nested entries (a loader's epoch, a DDP
wrap) are plain dicts whose keys are listed here. :class:`Settings` is what
the doctor tells the processes it runs; :class:`Outcome` is what a whole
run left (the records, its output, how it ended), which the judges read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

#: The environment variable that carries :class:`Settings` to a process the
#: doctor starts as a whole program (a script, torchrun), and to its children.
SETTINGS_ENV = "DDP_LESSON_DOCTOR"


#: The DDP(...) calls a rank records (a model wrapped again at every step would make many).
WRAPS_KEPT = 20


#: How a rank's stop names a partner that waits in a DDP step (its backward pass).
WAITED_IN_STEP = "a backward pass, where DDP averages gradients"

#: What a script's record gives as the torchrun variable it wanted when, run as
#: Python, it started torchrun's agent on itself (the doctor then runs it under torchrun).
SELF_LAUNCH = "torchrun's agent, started by the script"
#: ... when it started Python on itself (``subprocess.Popen([sys.executable, __file__])``)
#: with torchrun's variables in the environment it gave: the doctor's torchrun sets them.
SELF_SUBPROCESS = "Python on itself, started by the script with torchrun's variables"


@dataclass(frozen=True)
class Settings:
    """What the doctor tells every process of a run it records.

    Attributes:
        folder: where the processes send their records.
        file: the learner's file (its real path): lines are reported in it.
        port: the doctor's store on 127.0.0.1, where every group meets.
        nprocs: processes the doctor started (0: the script decides).
        batches: batches of each epoch a loader hands out.
        wait_s: seconds a rank waits for the others (joining, at a collective).
        stand_in: the machine has no GPU for every rank, so CUDA code runs on
            the CPU (NCCL as gloo, ``cuda`` devices as the CPU), as the
            course's device policy does (:func:`ddp_lesson.devices.gpus_for`).
        gpus: what ``torch.cuda.device_count()`` answers then, so that a
            script written for GPUs starts its processes (0: leave it alone).
    """

    folder: str
    file: str
    port: int
    nprocs: int = 0
    batches: int = 4
    wait_s: float = 20.0
    stand_in: bool = False
    gpus: int = 0

    def to_env(self) -> dict[str, str]:
        """The settings as the environment of a program the doctor starts."""
        return {SETTINGS_ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls, environ) -> Settings | None:
        """The settings a process was started with, if the doctor started it."""
        text = environ.get(SETTINGS_ENV)
        return cls(**json.loads(text)) if text else None


@dataclass(eq=False)  # records compare by identity: they hold tensors
class ProcessRecord:
    """Everything the doctor saw one process do.

    Attributes:
        index: the process number ``mp.spawn`` gave it, or torchrun's
            ``RANK`` (0 for the script's own process).
        claimed_rank, claimed_world_size: what it told ``init_process_group``.
        init: ``{"line", "asked", "backend", "joined", "address"}`` of its
            ``init_process_group`` call, once made (``address``: the
            ``MASTER_ADDR`` it had set).
        placements: ``{"asked", "line"}`` per ``model.to(...)`` of the learner's.
        set_device: ``{"asked", "line"}`` per ``torch.cuda.set_device``.
        loaders: ``{"line", "loader", "size", "sampler", "sampler_line",
            "sampler_id", "replicas", "shuffle", "epoch", "indices", "dropped",
            "batches", "used", "trained"}`` per epoch of a ``DataLoader``:
            ``sampler_line`` where its ``DistributedSampler`` was made,
            ``sampler_id`` the sampler's ``id()`` in that process,
            ``replicas`` its ``num_replicas``, ``dropped`` the indices the
            loader's ``drop_last=True`` left out of every batch.
        streams: ``{"line", "loader", "workers", "items", "batches",
            "trained"}`` per epoch of a ``DataLoader`` over an
            ``IterableDataset``: ``items`` a fingerprint of each item its
            first ``batches`` batches handed out, ``workers`` its loader workers.
        datasets: ``{"loader", "line", "sampler", "size", "items"}`` per
            ``DataLoader`` over a map-style data set: its length, and
            ``items`` a fingerprint per probed position (None: not stable).
        seeds: ``{"call", "value", "line", "loaders"}`` per seed the learner's
            file gave a random generator (``torch.manual_seed``,
            ``random.seed``, ``random.Random(...)``, ``numpy.random.seed``):
            ``value`` its repr, ``loaders`` the DataLoaders built before it.
        set_epochs: ``{"epoch", "line", "sampler_id"}`` per
            ``DistributedSampler.set_epoch`` call.
        ddp: ``{"line", "device_ids", "module_device", "asked", "error",
            "find_unused", "unused"}`` per ``DistributedDataParallel(...)``;
            ``unused``: its parameters that got no gradient in the first
            backward pass; ``join`` when it trained inside ``model.join()``,
            ``sync_batchnorm`` its SyncBatchNorm layers run as batch norm on
            CPU stand-ins.
        forwards: forward passes through DDP (``wrapped``), around it
            (``raw``), and the line of the first raw one (``raw_line``) and the
            learner's line that called its function (``raw_caller``).
        steps: ``{"params", "grads", "held", "wrapped", "collectives", "buffers"}``
            after each of the first optimiser steps: the sums of its parameters
            and gradients, how many parameter tensors it holds, how many of those
            a DDP model wraps, the collectives made so far, and the sum of the
            DDP models' floating buffers.
        params: the parameters after the last recorded step (a tensor: all of
            them, or evenly spaced values of a large model's).
        outside: ``{"index", "shape", "sum"}`` after the last recorded step,
            per parameter the optimiser trains that no DDP module holds
            (``index``: its place in the optimiser's parameters).
        trained: ``{"at", "sum", "count", "grads"}`` for the first backward
            passes: the sum of the parameters that pass trains, as the forward
            pass used them (``at`` 0 is before any update; this needs no
            optimiser), and the absolute sum of the gradients it left.
        model_events: ``{"event", "line", "params", "grads", ...}`` per event
            of the DDP models over the first steps, in order: ``wrap``,
            ``forward`` (through DDP), ``backward``, ``before_step`` (with
            the optimiser's ``settings`` per group), ``step``, ``load``
            (``load_state_dict`` into a wrapped model) and ``clip`` (with its
            ``call`` and ``limit``); ``params`` the sum of every wrapped
            parameter, ``grads`` the sum of their gradients' absolute values.
        trail: ``{"pre", "post", "lr"}`` per optimiser step of a DDP model (up to
            a few hundred): the sums of the wrapped parameters before and after
            the step, and the first parameter group's learning rate.
        schedules: the learner's line of each learning-rate scheduler step.
        edits: ``{"line", "caller", "after_step"}`` per learner's line that changed the
            wrapped parameters between an optimiser step and the next DDP forward
            (``after_step``: the steps made before it), the first few only.
        path: the learner's lines this rank ran since its last optimiser step (or
            the wrap), up to a few dozen: where a rank that stopped early left.
        collectives: ``{"op", "line"}`` per collective called from the learner's file;
            the first all-reduces add ``"reduce"`` (``"SUM"``...) and the absolute
            sums of their tensor ``"before"`` and ``"after"``; ``"tracked"`` marks
            one given a tensor that autograd records.
        call_lines: the lines of the learner's file where this rank called a
            forward through DDP (which may make a collective: the buffers'
            broadcast) or a collective, each once, in the order first met.
        waiting: ``{"op", "line"}`` while it waits in a collective.
        destroyed: ``{"line"}`` of its ``destroy_process_group`` call.
        returned: its function (or script) ended normally.
        alive_at_return: the group was still initialised when it returned.
        error: ``{"type", "message", "line", "stage", "time",
            "interrupted", "call", "import"}`` when it raised: ``stage`` is
            the stage of the torch call that raised (``None``: not a DDP
            call), ``interrupted`` that it was stopped from outside
            (KeyboardInterrupt), ``call`` that ``main`` could not
            be called with the arguments given.
        stop: ``{"stage", "evidence", "line", "time"}`` when the doctor stopped it.
        stopped_at: the line it was running when the deadline stopped it.
        spawns: for the script's own process, ``{"nprocs", "nargs", "line",
            "by", "target", "made", "given"}`` per call that started processes
            (``given``: the type of ``args`` when it was not a tuple; ``made``: the
            line of a ``multiprocessing.Process(...)``, ``line`` its start): ``by`` names
            the route (``"mp.spawn"``, ``"start_processes"``,
            ``"elastic_launch"``, ``"multiprocessing.Process"``,
            ``"multiprocessing.Pool"``; one entry per line for the last two,
            ``nprocs`` counting the processes that line started), ``target``
            the function each process runs.
        torchrun: for the script's own process run as Python, ``{"variable",
            "line"}`` when, before starting any process, it needed a variable
            that only torchrun sets (``RANK``...): it is a script for torchrun.
        gpu_count: ``{"line", "answered"}`` of the first GPU count the learner's
            lines asked for that a stand-in answered (``torch.cuda.device_count()``
            with no GPU for every rank).
        gpu_tensors: how many tensors were made on a stand-in GPU (a factory's
            ``device=``, also inside torch, as a module built with ``device=``).
        script: this is the script's own process, not a rank.
        launch: which of the script's starts of processes made it (the number
            of processes the earlier ones made; 0 for the first, and for a
            process the doctor or torchrun started).
        ran: the function a ``multiprocessing.Pool`` worker was sent as its task.
    """

    index: int
    claimed_rank: int | None = None
    claimed_world_size: int | None = None
    init: dict | None = None
    placements: list[dict] = field(default_factory=list)
    set_device: list[dict] = field(default_factory=list)
    loaders: list[dict] = field(default_factory=list)
    set_epochs: list[dict] = field(default_factory=list)
    streams: list[dict] = field(default_factory=list)
    datasets: list[dict] = field(default_factory=list)
    seeds: list[dict] = field(default_factory=list)
    ddp: list[dict] = field(default_factory=list)
    forwards: dict = field(default_factory=lambda: {"wrapped": 0, "raw": 0, "raw_line": None})
    steps: list[dict] = field(default_factory=list)
    params: object = None
    outside: list[dict] = field(default_factory=list)
    trained: list[dict] = field(default_factory=list)
    model_events: list[dict] = field(default_factory=list)
    trail: list[dict] = field(default_factory=list)
    schedules: list[int] = field(default_factory=list)
    edits: list[dict] = field(default_factory=list)
    path: list[int] = field(default_factory=list)
    collectives: list[dict] = field(default_factory=list)
    call_lines: list[int] = field(default_factory=list)
    waiting: dict | None = None
    destroyed: dict | None = None
    returned: bool = False
    alive_at_return: bool = False
    error: dict | None = None
    stop: dict | None = None
    stopped_at: int | None = None
    spawns: list[dict] = field(default_factory=list)
    torchrun: dict | None = None
    gpu_count: dict | None = None
    gpu_tensors: int = 0
    script: bool = False
    launch: int = 0
    ran: str | None = None

    @property
    def rank(self) -> int:
        """The process number (``index``), as every report names it."""
        return self.index

    def fields(self) -> dict:
        """The record as a report's fields (what crosses from the process to the doctor)."""
        return {k: v for k, v in asdict(self).items() if k != "index"}

    @classmethod
    def from_report(cls, report: dict) -> ProcessRecord:
        """The record a process sent (its report's ``rank`` is the process's index)."""
        known = {f.name for f in fields(cls)}
        return cls(index=report["rank"], **{k: v for k, v in report.items() if k in known})


@dataclass
class Outcome:
    """What a run of the file left behind.

    Attributes:
        ranks: one record per rank, sorted by rank.
        script: the record of the script's own process (``script`` launches).
        error: the launch's error, if it ended with one (a rank failed, the deadline).
        timed_out: the deadline stopped the run.
        timeout_s: the deadline, in seconds.
        output: what the processes printed.
        launch: how the file was started, as a reader would type or say it.
        codes: the exit code of each whole program started (the script, torchrun).
        stand_in: CUDA ran on the CPU (no GPU for every rank).
        gpus: the CUDA GPUs this machine has.
        kept: the user's paths the run wrote or deleted, each kept in the
            doctor's folder instead (:mod:`.sandbox`) and gone with it.
    """

    ranks: list[ProcessRecord] = field(default_factory=list)
    script: ProcessRecord | None = None
    error: Exception | None = None
    timed_out: bool = False
    timeout_s: float = 0.0
    output: str = ""
    launch: str = ""
    codes: list[int | None] = field(default_factory=list)
    stand_in: bool = False
    gpus: int = 0
    kept: list[str] = field(default_factory=list)
