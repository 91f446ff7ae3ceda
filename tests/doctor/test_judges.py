"""The doctor's judges return their verdicts and change nothing they are given.

Each judge takes what the run left (the records of the ranks, the whole
``Outcome``) and returns a frozen :class:`Judged`; ``judge.verdict`` puts
them together. A judge that wrote into its arguments would make one
judge's verdict depend on which ran before it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from ddp_lesson.doctor import judge, read
from ddp_lesson.doctor.judge_crash import crash_finding, crashes
from ddp_lesson.doctor.judge_data import data_verdict
from ddp_lesson.doctor.judge_evidence import Judged
from ddp_lesson.doctor.judge_model import model_verdict
from ddp_lesson.doctor.judge_processes import judge_group, judge_spawning, judge_teardown
from ddp_lesson.doctor.record import Outcome, ProcessRecord

SCRIPT = Path(__file__).resolve().parent / "scripts" / "correct.py"


def records() -> list[ProcessRecord]:
    """Two ranks that joined, trained on overlapping data and parted, one left its group open."""
    made = []
    for rank in range(2):
        made.append(
            ProcessRecord(
                rank,
                claimed_rank=rank,
                claimed_world_size=2,
                init={"line": 10, "asked": "gloo", "backend": "gloo", "joined": True},
                loaders=[{"line": 20, "loader": 0, "size": 8, "sampler": "RandomSampler",
                          "sampler_line": None, "sampler_id": 1, "replicas": None,
                          "shuffle": True, "epoch": None, "indices": list(range(8)),
                          "dropped": [], "batches": 2, "used": 2, "trained": True}],
                ddp=[{"line": 30, "device_ids": None, "module_device": "cpu", "asked": None,
                      "error": None, "find_unused": False, "static_graph": False,
                      "unused": []}],
                steps=[{"params": 1.0 + rank, "grads": 1.0, "held": 2, "wrapped": 2}] * 2,
                params=torch.tensor([1.0 + rank]),
                returned=True,
                alive_at_return=rank == 1,
            )
        )  # fmt: skip
    return made


def snapshot(value) -> str:
    """Everything a record or outcome holds, as text (records compare by identity)."""
    if isinstance(value, list):
        return repr([snapshot(v) for v in value])
    if isinstance(value, ProcessRecord):
        return repr(value.fields())
    return repr(value)


@pytest.mark.parametrize(
    "call",
    [
        lambda reading, outcome: judge_spawning(reading, outcome),
        lambda reading, outcome: judge_group(outcome.ranks),
        lambda reading, outcome: data_verdict(outcome.ranks),
        lambda reading, outcome: model_verdict(outcome.ranks, crashes(outcome)),
        lambda reading, outcome: judge_teardown(reading, outcome),
        lambda reading, outcome: crash_finding(reading, crashes(outcome), [], outcome.ranks),
    ],
    ids=["spawning", "group", "data", "model", "teardown", "crash"],
)
def test_a_judge_returns_its_verdict_and_changes_nothing(call):
    reading = read.read(SCRIPT)
    outcome = Outcome(ranks=records())
    before = (snapshot(outcome.ranks), repr(dataclasses.asdict(reading)))
    judged = call(reading, outcome)
    assert isinstance(judged, Judged)
    with pytest.raises(dataclasses.FrozenInstanceError):
        judged.shown = ()  # a verdict, not a place to write
    assert (snapshot(outcome.ranks), repr(dataclasses.asdict(reading))) == before


def test_the_verdict_puts_the_judges_together():
    outcome = Outcome(ranks=records())
    diagnosis = judge.verdict(read.read(SCRIPT), outcome, 2)
    assert set(diagnosis.faults) >= {"data_division", "model_wrapping", "teardown"}, diagnosis


def test_stages_after_a_fault_in_the_first_are_not_said_to_be_passed_unseen():
    # nothing worked (the first stage is the fault, the rest never ran): no later stage
    # can prove the run went past the others
    from ddp_lesson.doctor.judge_ending import passed_unseen
    from ddp_lesson.doctor.verdict import Diagnosis, StageVerdict

    stages = {"spawning": StageVerdict("FAULT", "started 2 of 4", 43)}
    for key in ("process_group", "data_division", "model_wrapping", "teardown"):
        stages[key] = StageVerdict("NOT CHECKED", "not reached: the run ended before it")
    diagnosis = Diagnosis("f.py", stages={k: v for k, v in stages.items()})
    passed_unseen(diagnosis)
    assert [v.evidence for v in diagnosis.stages.values()][1:] == [
        "not reached: the run ended before it"
    ] * 4


def test_ranks_that_part_between_steps_are_said_to_part_outside_the_optimizer_step():
    # the trail: equal through step 2; before step 3, rank 0's parameters had changed
    # since its step 2 (a copy of averaged weights, a load), and rank 1's had not
    from ddp_lesson.doctor.judge_model import model_verdict
    from ddp_lesson.doctor.record import ProcessRecord

    def record(rank: int, third: float) -> ProcessRecord:
        r = ProcessRecord(index=rank, claimed_rank=rank)
        r.ddp = [{"line": 9, "error": None, "device_ids": None, "module_device": "cpu",
                  "asked": None, "unused": None, "find_unused": False, "static_graph": False}]
        r.trail = [{"pre": 1.0, "post": 2.0, "lr": 0.1}, {"pre": 2.0, "post": 3.0, "lr": 0.1},
                   {"pre": third, "post": third + 1, "lr": 0.1}]  # fmt: skip
        return r

    judged = model_verdict([record(0, 7.5), record(1, 3.0)], [])
    said = [s.finding.evidence for s in judged.shown]
    assert len(said) == 1 and "apart before optimizer step 3" in said[0], said
    assert "rank 0's parameters changed between the two steps" in said[0], said
    assert model_verdict([record(0, 3.0), record(1, 3.0)], []).shown == ()


def test_the_seeds_of_the_samplers_are_named_by_each_rank_not_by_place():
    # rank 0 built no training loader; ranks 1 and 2 shuffled with different seeds
    ranks = []
    for rank, seed, order in ((0, None, None), (1, 5, [3, 0, 6, 1]), (2, 9, [3, 5, 2, 7])):
        loaders = [] if order is None else [{
            "line": 20, "loader": 0, "size": 8, "sampler": "DistributedSampler",
            "sampler_line": 19, "sampler_id": 1, "replicas": 2, "shuffle": True, "seed": seed,
            "epoch": 0, "indices": order, "dropped": [], "batches": 2, "used": 2,
            "trained": True,
        }]  # fmt: skip
        ranks.append(ProcessRecord(rank, claimed_rank=rank, claimed_world_size=3,
                                   loaders=loaders))  # fmt: skip
    said = " ".join(s.finding.evidence for s in data_verdict(ranks).shown)
    assert "different seeds (rank 1: 5, rank 2: 9)" in said, said
