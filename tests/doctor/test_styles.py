"""The doctor on scripts written in styles other than the lesson's, and on runs that go wrong.

``scripts/styles/`` holds correct and faulty scripts in other shapes: class-based
like PyTorch's multi-GPU example, torchrun scripts, data parallelism by
hand, a script written for GPUs only. A faulty one marks the line that
owns its fault with ``# planted: <stage>`` (``outside`` for a failure that
belongs to no stage); a correct one says ``Planted fault: none``. The
doctor must get each one right: the stage, the line, the exit code.

Then: a crash in every stage (and outside them) is never a success, a run
that checks nothing is not one either, nor one whose processes end before
a stage could be checked (the diagnosis quotes what they printed), and a
script that listens on every interface or starts more processes than the
machine can run gets a note.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch

from ddp_lesson import devices, doctor
from ddp_lesson.stages import KEYS

STYLES = Path(__file__).resolve().parent / "scripts" / "styles"
NAMES = sorted(p.stem for p in STYLES.glob("*.py"))

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: What a CPU run of a script written for GPUs says once, in a note.
STAND_INS = "GPU branch ran with CPU stand-ins for cuda:0 and cuda:1 (nccl ran as gloo)"

#: What else each script's diagnosis must say: {stage or "notes"/"launch": words}.
SAYS = {
    "trainer": {"launch": "python trainer.py", "data_division": "a new order in each of 3"},
    "trainer_torchrun": {
        "launch": "torchrun --standalone --nproc-per-node=2 trainer_torchrun.py --epochs 2",
        "spawning": "torchrun started 2 process(es)",
        "data_division": "each of 2 epochs",
    },
    "trainer_gpu": {"model_wrapping": "DDP wrapped the model on 2 ranks", "notes": STAND_INS},
    "trainer_crash": {"teardown": "not reached: a rank raised IndexError"},
    "set_device_first_gpu": {
        "process_group": "every rank selected cuda:0 with torch.cuda.set_device (line 18)",
        "model_wrapping": "DDP wrapped the model on 2 ranks",
    },
    "port_per_rank": {
        "process_group": "told to meet at different addresses (rank 0: 127.0.0.1:29596, "
        "rank 1: 127.0.0.1:29597)"
    },
    "nccl_model_on_cpu": {
        "process_group": "asked init_process_group for nccl, but no rank sent its model to a "
        "GPU: DDP wrapped it on the CPU"
    },
    "entry_arguments_swapped": {
        "spawning": "world_size=0, which is this process's number, and rank=2, the number of "
        "processes: worker (line 14) takes its parameters in another order",
    },
    "pretrained_then_frozen_on_rank0": {
        "model_wrapping": "the ranks' models differ there (a part frozen with "
        "requires_grad_(False), added or left out on some ranks only)",
        "data_division": "not reached: a rank raised RuntimeError at line 34",
    },
    "join_epochs_uneven": {"model_wrapping": "DDP wrapped the model on 2 ranks (cpu); "
                           "parameters identical on every rank after 3 step(s)"},
    "aux_loss_some_steps": {
        "model_wrapping": "`aux.weight`, `aux.bias` got no gradient in backward pass 2",
    },
    "world_size_env_default": {
        "process_group": "this process has no WORLD_SIZE in its environment, so line 16",
    },
    "early_stop_own_loss": {
        "model_wrapping": "rank 0 left its training loop at line 35 (`break`) after its "
        "optimizer step 15",
    },
    "process_loop_same_rank": {
        "spawning": "were each given 0 as their first argument, which fit passes to "
        "init_process_group as the rank"
    },
    "init_file_per_process": {"process_group": "give every rank the same file: choose its "
                              "path once, before the processes start"},
    "uneven_shards": {
        "data_division": "rank 1's loader ran out after",
        "process_group": "ranks [0, 1] joined one gloo group",
        "teardown": "not reached: the run ended at the splitting the data fault",
    },
    "self_subprocess": {
        "spawning": "in place of the script's own start of Python on itself with torchrun's "
        "variables (subprocess, line 38)",
    },
    "gpu_default_device": {
        "model_wrapping": "DDP wrapped the model on 2 ranks; parameters identical",
        "notes": "asked for nccl, which ran as gloo on the CPU",
    },
    "gpu_timed_epochs": {
        "model_wrapping": "DDP wrapped the model on 2 ranks; parameters identical",
        "notes": STAND_INS,
    },
    "gpu_model_built_on_device": {
        "model_wrapping": "DDP wrapped the model on 2 ranks; parameters identical",
        "notes": "torch.cuda.device_count() (line 38) answered 2 to the script, counting the "
        "stand-ins (without the doctor it answers 0 here)",
    },
    "by_hand": {
        "model_wrapping": "not wrapped in DDP, yet the ranks kept it in step",
        "data_division": "(shuffle=False)",
    },
    "by_hand_no_broadcast": {"model_wrapping": "started from weights of its own"},
    "unused_head": {"model_wrapping": "`aux.weight`, `aux.bias`"},
    "eval_rank0": {"process_group": "rank 1 ended without calling it"},
    "check_in_between_rank0": {"process_group": "(line 17, called from line 35)"},
    "destroy_early": {"teardown": "after destroy_process_group() at line 22"},
    "finish_hook_rank0": {
        "process_group": "rank 0 waits in barrier() (line 31), but rank 1 ended without "
        "calling it"
    },
    "node_rank": {"process_group": "both claimed rank 0"},
    # a pool's worker thread (Python's own, ended at exit) is no thread left running
    "checkpoint_writer_pool": {"teardown": "released the group"},
    "watcher_thread_kept": {
        "teardown": "rank 1's thread 'watcher' (started at line 28) was still running 3 s "
        "after the rank's function returned"
    },
    "process_loop_from_one": {
        "spawning": "given 2 as its first argument, which work passes to init_process_group "
        "as the rank; in a world of 2 the ranks are 0..1"
    },
    "partial_binds_first": {
        "spawning": "which is fit's first parameter, world_size (line 13); but "
        "functools.partial already gives world_size by keyword"
    },
    "short_group_timeout": {
        "process_group": "in barrier() (line 29) for the other ranks to reach it, longer than "
        "the 2 s timeout its group was given (line 23)"
    },
    "step_every_micro_batch": {
        "model_wrapping": "optimizer.step() (line 33) ran after every micro-batch, also right "
        "after a backward (line 32) of a forward pass (line 31) inside model.no_sync()"
    },
    "accumulate_epoch_tail": {
        "model_wrapping": "optimizer.step() (line 34) ran after 2 micro-batch(es) that all "
        "ran inside model.no_sync() (forward at line 38), while earlier steps followed 3"
    },
    "nccl_by_uncalled_test": {
        "process_group": "line 18 (`self.backend = \"nccl\" if torch.cuda.is_available else "
        "\"gloo\"  # planted: process_group`) names a test without calling it"
    },
    "results_queue_read_after_join": {
        "teardown": "ranks 0, 1 put data on a multiprocessing queue (line 28), and 3 s after "
        "the rank's function returned the queue still held it"
    },
    "start_processes_at_import": {
        "spawning": "mp.start_processes is called at line 18, outside `if __name__ =="
    },
    "spawn_args_without_comma": {
        "spawning": "mp.spawn (line 22) was given args as a str, not a tuple, and unpacks what "
        "it is given, so each of the str's 6 item(s) became an argument of its own"
    },
    "rank0_validation_two_calls_deep": {
        "process_group": "rank 0 waits in all_reduce() (line 12, called from line 18, from "
        "line 34)"
    },
    # (the rank left waiting says the same as the rank that released the group)
    "released_before_last_collective": {
        "teardown": "all_gather() at line 29 runs after destroy_process_group() at line 14 "
        "(called from line 27) released the group"
    },
    "world_from_gpu_count": {
        "process_group": "init_process_group got rank=1, world_size=1, but 2 processes were "
        "started, so rank 1 falls outside the world; the file counts GPUs (line 16"
    },
    "running_mean_on_rank0": {
        "model_wrapping": "every rank changed the wrapped model's parameters at line 30"
    },
    "process_target_called": {
        "spawning": "line 21 gives spawn.Process target=train(r, 2): the parentheses call train "
        "right there, in the script's own process, before any process is started (it joins "
        "the group there"
    },
    "process_target_factory": {"spawning": "started 2 process(es)"},
    "store_hosted_everywhere": {
        "process_group": "the TCPStore made at line 16 with is_master=True could not listen on "
        "port 29855: another process already does"
    },
    "rank_env_default_under_spawn": {
        "process_group": "gave its default; set RANK for every process the script starts, or "
        "pass the value in; its start handed main its number first (this process: "
    },
    "process_run_called": {
        "spawning": "line 28 calls run() on a multiprocessing.Process: run() runs its target "
        "(train) right there"
    },
    "master_port_on_rank0": {
        "process_group": "rank 1 reached init_process_group (line 20), which meets through the "
        "environment (env://), with no MASTER_PORT in its own"
    },
    "pool_prepares_then_spawn": {
        "launch": "(it starts its processes with mp.spawn)",
        "spawning": "mp.spawn started 2 process(es), each running fit",
        "teardown": "before fit returned",
    },
    "freeze_on_one_rank_midway": {
        "model_wrapping": "some parameter DDP wraps got no gradient on that rank",
    },
    "rank_from_inherited_env": {
        "process_group": "none gave rank=, so each read RANK from its environment, and two "
        "found 0 there"
    },
    "daemons_not_joined": {
        "spawning": "mp.spawn (line 30) started 2 daemonic process(es) with join=False, and "
        "the script never joined them"
    },
    "backend_test_uncalled": {
        "process_group": "line 12 (`if torch.cuda.is_available:  # planted: process_group`) "
        "names a test without calling it"
    },
    "main_called_at_import": {
        "spawning": "mp.spawn (line 22) is reached from line 25, which runs when the file is "
        'imported, outside `if __name__ == "__main__":`'
    },
    "nodes_from_arguments": {
        "process_group": "world_size=4, a world of 2 machines with 2 process(es) each (line "
        "27: `total = opts.nnodes * opts.procs_per_node`), but this machine started 2"
    },
    "config_world": {"spawning": "for a world of 4"},
    "shared_data": {"data_division": "overlap between ranks 100%"},
    "peek_first": {"data_division": "a new order in each of 3 epochs"},
    "accelerator": {
        "model_wrapping": "DDP wrapped the model on 2 ranks",
        "notes": STAND_INS,
        "data_division": "its own 180 of 360 training items, 160 of them in full batches "
        "(drop_last)",
    },
    "snapshot": {"spawning": "torchrun started 2", "notes": STAND_INS},
    "accumulate": {"data_division": "64 of the 128 training items were never seen"},
    "late_set_epoch": {"data_division": "set_epoch is called too late"},
    "connect_each_epoch": {"process_group": "make the group once per process, outside what"},
    "part_wrapped": {"model_wrapping": "outside the module DDP wraps: 2 tensor(s)"},
    "hand_split": {"data_division": "a data set of its own (split by hand"},
    "hand_split_uneven": {
        "data_division": "(rank 0: 4, rank 1: 4, rank 2: 5)",
        "teardown": "not reached: a rank raised RuntimeError at line 25",
    },
    "optimizer_elsewhere": {"model_wrapping": "updates none of the parameters DDP wraps"},
    "syncbn_gpu": {"notes": "SyncBatchNorm, which needs GPUs, ran as plain batch norm"},
    "sweep_in_turn": {
        "teardown": "ranks [0, 1] released the group",
        "spawning": "started 2 process(es) at each of 2 calls",
        "process_group": "ranks [0, 1] joined one gloo group at each of the script's 2 starts",
    },
    "sweep_at_once": {"process_group": "two groups the script started at once both meet"},
    "custom_sampler": {"data_division": "a new order in each of 3 epochs"},
    "set_epoch_other_sampler": {"data_division": "but on another sampler than the one"},
    "drop_last_per_rank": {"data_division": "(rank 0: 3, rank 1: 4)"},
    "gather_uneven": {"process_group": "tensors of different shapes (rank 0: 11, rank 1: 10)"},
    # the launch route found by running the script as Python first
    "fit_spawn": {
        "launch": "python fit_spawn.py (it starts its processes with mp.spawn)",
        "spawning": "mp.spawn started 2 process(es), each running run_rank",
    },
    "elastic": {
        "launch": "python elastic.py (it starts its processes with elastic_launch)",
        "spawning": "elastic_launch started 2 process(es), each running train",
        "teardown": "before train returned",
    },
    "process_loop": {
        "spawning": "multiprocessing.Process started 2 process(es), each running worker",
    },
    "process_one_by_one": {
        "spawning": "rank 0 was waiting in init_process_group (line 17) for the 2 processes "
        "of its group while the script had started only 1: the script joins each process "
        "(line 45) before it starts the next",
    },
    "torchrun_as_program": {
        "spawning": "torchrun, in place of the script's own start of torchrun's agent on "
        "itself (line 38), started 2",
    },
    "self_launch": {
        "launch": "torchrun --standalone --nproc-per-node=2 self_launch.py",
        "spawning": "torchrun, in place of the script's own start of torchrun's agent on "
        "itself (line 37), started 2",
    },
    "wrap_in_loop": {
        "spawning": "mp.spawn started 2 process(es), each running worker",
        "model_wrapping": "wrapped the same model",
    },
    "score_on_rank0": {"model_wrapping": "rank 1 never made a call at that line"},
    "score_batchnorm_rank0": {
        "model_wrapping": "different numbers of forward passes without gradients through the "
        "DDP model (rank 0: 1, rank 1: 0; line 27, called from line 48)"
    },
    "flat_sum": {"model_wrapping": "all-reduce their gradients with SUM (line 16)"},
    "flat_mean": {"model_wrapping": "not wrapped in DDP, yet the ranks kept it in step"},
    # a GPU branch (torch.cuda.is_available()): run after the branch this machine takes
    "gpu_branch_first_gpu": {
        "model_wrapping": "every rank asked for cuda:0 for its model",
        "notes": "the branch this machine takes without GPUs ran first and showed no fault",
    },
    "gpu_branch_device_name": {
        "notes": "GPU branch could not run on CPU stand-ins (AssertionError: Torch not "
        "compiled with CUDA enabled at line 21)",
    },
    "join_uneven": {"data_division": "inside join(), which lets the ranks that finish first"},
    "pad_sampler": {"data_division": "(1 repeated as padding)"},
    "release_on_error": {"teardown": "released only from line 40, which runs only after"},
    "own_statistics": {"notes": "broadcast_buffers=False) at line 24: the ranks' buffers"},
    "decay_on_rank0": {"model_wrapping": "(rank 0: 0.05, rank 1: 0.1): the scheduler at line 34"},
    "subset_own_seed": {"data_division": "subsets share 27 item(s) and leave 27 out"},
    "subset_one_seed": {"data_division": "a data set of its own (split by hand"},
    "loss_summed_in_place": {"notes": "all_reduce() at line 29 was given a tensor that autograd"},
    "subset_from_sampler": {"data_division": "items rank 0: 50, rank 1: 50"},
    "torchrun_env_alias": {
        "launch": "torchrun --standalone --nproc-per-node=2 torchrun_env_alias.py",
        "spawning": "torchrun started 2 process(es)",
    },
    # a rank stuck elsewhere is named with its line, not the step its partner waited in
    "spin_rank1": {"model_wrapping": "parameters identical on every rank"},
    "zero_sharded_optimizer": {"model_wrapping": "parameters identical on every rank"},
    "two_models_adversarial": {"model_wrapping": "parameters identical on every rank"},
}

#: Command-line arguments a script is diagnosed with.
ARGS = {"trainer_torchrun": ("--epochs", "2")}


def expected(path: Path) -> tuple[str | None, int | None]:
    """The planted stage (or "outside") and its line; (None, None) for a correct script."""
    text = path.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        match = re.search(r"# planted: (\w+)", line)
        if match:
            return match[1], number
    assert "Planted fault: none" in text, f"{path.name} says neither what is planted nor none"
    return None, None


def test_the_set_has_correct_scripts_in_four_styles_and_a_fault_in_every_stage():
    planted = {expected(STYLES / f"{name}.py")[0] for name in NAMES}
    assert planted >= {*KEYS, "outside", None}
    correct = [n for n in NAMES if expected(STYLES / f"{n}.py")[0] is None]
    assert len(correct) >= 4
    assert set(SAYS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_doctor_is_right_on_every_style(name):
    stage, line = expected(STYLES / f"{name}.py")
    result = doctor.diagnose(STYLES / f"{name}.py", 2, args=ARGS.get(name, ()))
    shown = str(result)
    assert not result.problem, shown
    if stage is None:
        assert result.faults == [] and result.failure is None, shown
        assert [s.status for s in result.stages.values()] == [doctor.OK] * 5, shown
        assert result.exit_code == 0 and result.completed
    elif stage == "outside":
        assert result.faults == [], shown
        assert result.failure is not None and result.failure.line == line, shown
        assert result.exit_code == 1
    else:
        assert result.faults == [stage], shown
        assert result.stages[stage].line == line, shown
        assert result.exit_code == 1
    for key, words in SAYS[name].items():
        if key == "notes" and devices.gpus_for(2):
            continue  # a GPU for each rank: a script for GPUs runs as written
        said = {"launch": result.launch, "notes": " ".join(result.notes)}.get(key)
        if said is None:
            said = result.stages[key].evidence
        assert words in said, shown
    if SAYS[name].get("notes") == STAND_INS and not devices.gpus_for(2):
        # the stand-ins are named in that note alone, never as the machine's devices
        assert not any("cuda:" in s.evidence for s in result.stages.values()), shown


# -- a crash in every stage --------------------------------------------------------------
WORKER = '''
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(rank, world_size{extra}):
    {before}dist.init_process_group("gloo", rank=rank, world_size=world_size)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data{sampler}))
    model = DDP(torch.nn.Linear(4, 1){frozen})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        {during}
    dist.destroy_process_group()
    {after}
'''

#: Where each crash goes: (stage or "outside", what to put where, the words of the evidence).
CRASHES = {
    "spawning": ({"extra": ", epochs"}, "takes 3 argument(s)"),
    "process_group": ({"before": "print(dist.get_rank())\n    "}, "ValueError"),
    "data_division": ({"sampler": ", rank=world_size"}, "ValueError: Invalid rank"),
    "model_wrapping": ({"frozen": ".requires_grad_(False)"}, "RuntimeError"),
    "teardown": ({"after": "dist.destroy_process_group()"}, "AssertionError"),
    "outside": ({"during": "assert loss.item() < 0, 'a loss below zero'"}, "AssertionError"),
}


@pytest.mark.parametrize("stage", list(CRASHES))
def test_a_crash_in_any_stage_is_a_fault_there_never_a_success(stage, tmp_path):
    parts, words = CRASHES[stage]
    fields = {"extra": "", "before": "", "sampler": "", "frozen": "", "during": "", "after": ""}
    source = WORKER.format(**{**fields, **parts})
    path = tmp_path / "crashes.py"
    path.write_text(source)
    result = doctor.diagnose(path, 2)
    shown = str(result)
    assert result.exit_code == 1 and not result.ok and not result.completed, shown
    if stage == "outside":
        assert result.faults == [] and result.failure is not None, shown
        verdict = result.failure
    else:
        assert result.faults == [stage] and result.failure is None, shown
        verdict = result.stages[stage]
    assert words in verdict.evidence, shown
    line = max(  # the changed line (teardown's second destroy follows the first)
        n for n, text in enumerate(source.splitlines(), 1)
        if any(v.strip() and v.strip() in text for v in parts.values())
    )  # fmt: skip
    assert verdict.line == line, shown


@pytest.mark.skipif(devices.gpus_for(2), reason="the GPUs answer the call themselves")
def test_a_gpu_call_the_stand_ins_cannot_answer_leaves_the_rest_not_checked(tmp_path):
    """Without CUDA, a call the stand-ins do not cover ends the run: that is the doctor's
    limit, not the script's fault, and what it could not run is said, with exit 2."""
    fields = {"extra": "", "sampler": "", "frozen": "", "during": "", "after": ""}
    before = "handle = torch.cuda.current_blas_handle()\n    "
    path = tmp_path / "blas.py"
    path.write_text(WORKER.format(**fields, before=before))
    result = doctor.diagnose(path, 2)
    shown = str(result)
    assert result.faults == [] and result.exit_code == 2, shown
    assert result.failure.status == doctor.NOT_CHECKED and result.failure.line == 10, shown
    assert "no CPU stand-in for it" in result.failure.evidence, shown


# -- what a run must do to be called healthy ------------------------------------------------
def test_a_script_that_checks_nothing_before_its_deadline_is_no_success(tmp_path):
    path = tmp_path / "sleeps.py"
    path.write_text(
        "import time\n\nimport torch.multiprocessing as mp\n\n\n"
        "def main(rank, world_size):\n    pass\n\n\n"
        'if __name__ == "__main__":\n    time.sleep(600)\n'
        "    mp.spawn(main, args=(2,), nprocs=2)\n"
    )
    started = time.monotonic()
    result = doctor.diagnose(path, 2, timeout_s=4)
    assert time.monotonic() - started < 20
    assert result.exit_code == 2, str(result)
    assert "nothing in sleeps.py could be checked" in result.problem
    assert "deadline of 4 s" in result.problem and "--timeout" in result.problem
    assert re.findall(r"line (\d+)", result.problem) in ([], ["11"]), result.problem


def test_listening_everywhere_and_too_many_processes_get_a_note(tmp_path):
    path = tmp_path / "wide.py"
    path.write_text(
        "import os\nimport socket\n\nimport torch.multiprocessing as mp\n\n\n"
        "def main(rank, world_size):\n"
        '    os.environ["MASTER_ADDR"] = "0.0.0.0"\n\n\n'
        'if __name__ == "__main__":\n'
        "    probe = socket.socket()\n"
        '    probe.bind(("", 0))\n'
        "    probe.close()\n"
        "    mp.spawn(main, args=(NPROCS,), nprocs=NPROCS)\n".replace("NPROCS", "9")
    )
    try:
        devices.check_world_size(9, gpus=0)
    except ValueError:
        pass
    else:
        pytest.skip("this machine can run 9 CPU processes usefully")
    result = doctor.diagnose(path, 2)
    notes = "\n".join(result.notes)
    assert "line 8 uses the address '0.0.0.0'" in notes, notes
    assert "line 13 uses the address '' (an empty host)" in notes, notes
    assert "the script starts 9 processes" in notes and "more CPU processes" in notes, notes


# -- runs that end before the doctor could check a stage ---------------------------------------
GIVES_UP = '''
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world_size, folder):
    if not os.path.isdir(folder):
        print(f"rank {rank}: no shards in {folder}, nothing to train on")
        return
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    DDP(torch.nn.Linear(2, 1))
    dist.destroy_process_group()


if __name__ == "__main__":
    folder = os.path.join(os.path.dirname(__file__), "shards")
    {top}
    mp.spawn(train, args=(2, folder), nprocs=2)
'''


def test_a_script_that_ends_before_starting_its_processes_says_what_it_printed(tmp_path):
    path = tmp_path / "gives_up.py"
    path.write_text(GIVES_UP.replace(
        "{top}",
        'if not os.environ.get("SHARDS_READY"):\n'
        '        print("set SHARDS_READY=1 once the shards are written")\n'
        "        sys.exit(0)",
    ))  # fmt: skip
    result = doctor.diagnose(path, 2)
    assert result.exit_code == 2 and not result.ok, str(result)
    assert "the script ended without starting any process" in result.problem, result.problem
    assert "`set SHARDS_READY=1 once the shards are written`" in result.problem, result.problem


@pytest.mark.parametrize("style", ["spawn", "torchrun"])
def test_ranks_that_end_before_the_stages_are_no_success(style, tmp_path):
    path = tmp_path / "gives_up.py"
    source = GIVES_UP.replace("{top}", "pass")
    if style == "torchrun":
        source = (
            source.replace("def train(rank, world_size, folder):", "def train(folder):")
            .replace('print(f"rank {rank}:', 'print(f"rank {os.environ[\'RANK\']}:')
            .replace('dist.init_process_group("gloo", rank=rank, world_size=world_size)',
                     'dist.init_process_group("gloo")')
            .replace("mp.spawn(train, args=(2, folder), nprocs=2)", "train(folder)")
        )  # fmt: skip
    path.write_text(source)
    result = doctor.diagnose(path, 2)
    shown = str(result)
    assert not result.problem and not result.ok and result.exit_code == 1, shown
    assert result.faults == [] and result.failure is not None, shown
    statuses = [s.status for s in result.stages.values()]
    assert statuses == [doctor.OK] + [doctor.NOT_CHECKED] * 4, shown
    ended = "the script ended" if style == "torchrun" else "main returned"
    ended += " on ranks 0, 1"
    assert f"not reached: {ended} before this stage" in result.stages["process_group"].evidence
    assert f"{ended} before connecting processes could be checked" in result.failure.evidence
    assert "no shards in" in result.failure.evidence, shown
    # the ranks print at once: their lines can run together, so no line end is assumed
    assert "nothing to train on" in result.failure.evidence, shown


def test_map_location_naming_a_gpu_loads_onto_the_cpu_stand_in():
    from ddp_lesson.doctor.probe import cpu_location

    assert cpu_location("cuda:1") == "cpu"
    assert cpu_location(torch.device("cuda", 0)) == "cpu"
    assert cpu_location({"cuda:0": "cuda:1", "cpu": "cpu"}) == {"cuda:0": "cpu", "cpu": "cpu"}
    assert cpu_location({"cuda:0": torch.device("cuda:3")}) == {"cuda:0": "cpu"}
    assert cpu_location("cpu") == "cpu" and cpu_location(None) is None
    mapper = lambda storage, location: storage  # noqa: E731
    assert cpu_location(mapper) is mapper


IN_LOOP = '''
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def main(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:PORT",
                            rank=rank, world_size=world_size)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for step in range(8):  # tensors made in the loop: nothing records what each rank saw
        x = torch.full((8, 4), float(rank * 8 + step))
        y = x[:, :1] % 3
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
'''


def test_a_stage_the_run_passed_unseen_is_not_called_an_early_end(tmp_path):
    # Tensors made in the loop leave nothing to record of what each rank saw, so the
    # data division goes unchecked; the run went on to train through DDP and release the
    # group, so it did not end before that stage, and nothing is a fault.
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    script = tmp_path / "stream.py"
    script.write_text(IN_LOOP.replace("PORT", str(port)))
    result = doctor.diagnose(script, 2)
    shown = str(result)
    assert not result.problem and result.faults == [] and result.failure is None, shown
    assert result.stages["data_division"].status == doctor.NOT_CHECKED, shown
    assert result.stages["model_wrapping"].status == doctor.OK, shown
    assert result.stages["data_division"].evidence.startswith("not seen: the run went on"), shown


def test_a_wrapped_model_that_never_trains_is_called_wrapped_not_exercised(tmp_path):
    # Only an evaluation pass runs through DDP: no backward, no optimiser step,
    # so no gradient was ever exchanged and the verdict must not claim more.
    path = tmp_path / "evaluates.py"
    path.write_text(
        WORKER.format(extra="", before="", sampler="", frozen="", during="", after="")
        .replace("        loss = ((model(x) - y) ** 2).mean()\n", "        with torch.no_grad():\n"
                 "            model(x)\n        continue\n")  # fmt: skip
    )
    result = doctor.diagnose(path, 2)
    shown = str(result)
    assert result.stages["model_wrapping"].status == doctor.OK, shown
    assert "not exercised" in result.stages["model_wrapping"].evidence, shown


# -- ranks started by a Pool: each worker's task is followed as a rank's function ----------------
POOL = '''
import multiprocessing

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29561", rank=rank, world_size=2)
    model = DDP(torch.nn.Linear(2, 1))
    model(torch.ones(4, 2)).sum().backward()
    dist.destroy_process_group()
    return rank


if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        print("finished:", pool.map(train, range(2)))
'''


#: The pool's tasks meeting through the environment instead (env://, set in each task), in
#: processes of the spawn method (a fresh torch, nothing of the script's process inherited).
POOL_ENV = POOL.replace(
    "multiprocessing.Pool(2)", 'multiprocessing.get_context("spawn").Pool(2)'
).replace(
    'dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29561", rank=rank, '
    "world_size=2)",
    'os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29562")\n'
    '    dist.init_process_group("gloo", rank=rank, world_size=2)',
).replace("import multiprocessing\n", "import multiprocessing\nimport os\n")


@pytest.mark.parametrize("source", [POOL, POOL_ENV], ids=["fork_tcp", "spawn_env"])
def test_ranks_started_by_a_pool_are_judged_as_ranks(tmp_path, source):
    # whichever way the pool starts its workers and the tasks meet
    assert source.count("init_process_group") == 1
    path = tmp_path / "pooled.py"
    path.write_text(source)
    result = doctor.diagnose(path, 2)
    shown = str(result)
    assert result.exit_code == 0 and result.faults == [], shown
    said = {key: verdict.evidence for key, verdict in result.stages.items()}
    assert "multiprocessing.Pool started 2 process(es), each running train" in said["spawning"]
    assert "ranks [0, 1] joined one gloo group" in said["process_group"], shown
    assert "before train returned" in said["teardown"], shown


def test_a_pool_whose_tasks_claim_one_rank_is_named_at_its_start(tmp_path):
    path = tmp_path / "pooled.py"
    path.write_text(POOL.replace("pool.map(train, range(2))", "pool.map(train, [0, 0])"))
    result = doctor.diagnose(path, 2)
    assert result.faults == ["spawning"], str(result)
    said = result.stages["spawning"].evidence
    assert "the tasks sent to the multiprocessing.Pool were each given 0" in said, said
    assert "one of range(world_size) per task" in said, said


def test_a_rank_that_left_early_is_named_not_the_step_its_partner_waited_in(tmp_path):
    source = (STYLES / "spin_rank1.py").read_text()
    assert "            time.sleep(3600)  # planted: outside\n" in source
    path = tmp_path / "leaves.py"
    path.write_text(source.replace("            time.sleep(3600)  # planted: outside\n",
                                   "            return\n"))
    result = doctor.diagnose(path, 2)
    shown = str(result)
    line = path.read_text().splitlines().index("            return") + 1
    model = result.stages["model_wrapping"]
    assert result.exit_code == 1 and model.status == doctor.FAULT and model.line == line, shown
    assert (
        f"rank 1 left its training loop at line {line} (`return`) after its optimizer step 1 "
        "(in the doctor's run, which takes a few batches of each epoch) and returned from its "
        "function; rank 0 went on and gave up waiting for it" in model.evidence
    ), shown
    assert "a stop decided on one rank must be decided on all" in model.evidence, shown


def test_a_script_that_starts_python_on_itself_is_run_under_torchrun_not_left_waiting():
    """Its children, given torchrun's variables, are its ranks: the doctor's torchrun
    starts them instead (recorded), and that start is no program left unwatched."""
    result = doctor.diagnose(STYLES / "self_subprocess.py", 2)
    shown = str(result)
    assert result.exit_code == 0 and result.launch.startswith("torchrun "), shown
    assert not any("other programs" in note for note in result.notes), shown


def test_ranks_a_script_starts_as_programs_of_its_own_are_named_not_followed(tmp_path):
    """Children told their rank on the command line are programs the doctor cannot record:
    the report names the line that starts them and the two routes it can follow."""
    source = (STYLES / "self_subprocess.py").read_text()
    source = source.replace(
        '    dist.init_process_group("gloo")',
        '    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29809",\n'
        "                            rank=int(sys.argv[1]), world_size=RANKS)",
    ).replace(
        '[sys.executable, __file__], env={**os.environ, **shared, "RANK": str(r)}',
        "[sys.executable, __file__, str(r)]",
    ).replace('if "RANK" in os.environ', "if len(sys.argv) > 1")
    path = tmp_path / "by_argument.py"
    path.write_text(source)
    result = doctor.diagnose(path, 2)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "Popen" in text)
    assert result.exit_code == 2, str(result)
    assert f"the programs it starts (line {line}) are not followed" in result.problem


def test_a_collective_in_the_ranks_own_function_names_no_caller(tmp_path):
    """A rank forked inside mp.spawn keeps the script's `__main__` lines under it: the
    line that started the processes did not call the collective, and is not named."""
    source = (STYLES / "check_in_between_rank0.py").read_text().replace(
        '            print("positive:", progress(model, points))',
        "            hits = (model(points).squeeze(1) > 0).sum().float()\n"
        "            dist.all_reduce(hits)",
    )
    path = tmp_path / "inline.py"
    path.write_text(source)
    result = doctor.diagnose(path, 2)
    line = source.splitlines().index("            dist.all_reduce(hits)") + 1
    said = result.stages["process_group"].evidence
    assert result.faults == ["process_group"] and f"(line {line})" in said, str(result)
    assert "called from" not in said, str(result)


def test_unused_parameters_are_the_one_cause_named_when_the_ranks_then_part(tmp_path):
    """With Adam the ranks part after the step whose reduction never finished: that is
    the unused parameters' doing, not optimisers that differ."""
    source = (STYLES / "unused_head.py").read_text()
    source = source.replace("torch.optim.SGD(model.parameters(), lr=0.1)",
                            "torch.optim.Adam(model.parameters(), lr=0.01)")  # fmt: skip
    path = tmp_path / "unused_adam.py"
    path.write_text(source)
    result = doctor.diagnose(path, 2)
    said = result.stages["model_wrapping"].evidence
    assert result.faults == ["model_wrapping"] and "`aux.weight`, `aux.bias`" in said, said
    assert "optimisers" not in said, str(result)


def test_a_loop_that_trains_before_ddp_is_not_taken_for_the_one_to_divide():
    """A pretraining loop with a plain loader comes first in the file; the loop over the DDP
    model has its DistributedSampler: the code suggests nothing about a missing sampler."""
    result = doctor.diagnose(STYLES / "pretrained_then_frozen_on_rank0.py", 2)
    assert "the code suggests" not in result.stages["data_division"].evidence, str(result)
