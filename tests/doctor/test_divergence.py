"""The doctor names what parted the ranks' parameters, from the ranks' own timelines.

``scripts/styles/divergence/`` holds scripts whose ranks part after DDP has
wrapped the model: rank 0 alone loads weights, rank 0 alone clips its
gradients, rank 1 alone edits its weights by hand, the learning rate
differs per rank; and one that does all of these the same way on every
rank. Each faulty one marks its fault's line with ``# planted:
model_wrapping``. The verdict must name the cause (and where the record
holds the line, that line), and must not blame tensors outside the module,
which none of these scripts has.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddp_lesson import doctor

SCRIPTS = Path(__file__).resolve().parent / "scripts" / "styles" / "divergence"
NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py"))

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: What each verdict must say; True when the verdict's line is the planted line.
SAYS = {
    "load_on_rank0": (["rank 0 loaded a state dict", "after DDP(...) had wrapped it",
                       "rank 1 did not", "Load on every rank"], True),
    "clip_on_rank0": (["rank 0 clipped its gradients (clip_grad_norm_ at line 23)",
                       "rank 1 did not", "equal after backward"], True),
    "edit_on_rank1": (["rank 1 changed the wrapped model's parameters at line 26, called "
                       "from line 34, after optimizer step 1", "outside optimizer.step()"],
                      True),
    "shrink_on_rank0_each_epoch": (["rank 0 changed the wrapped model's parameters at line "
                                    "28, called from line 37", "and the other ranks did not",
                                    "Make the change on every rank"], True),
    "warm_start_on_rank0": (["rank 0 changed the wrapped model's parameters at line 25, "
                             "after DDP(...) had wrapped it", "the other ranks did not"],
                            True),
    "lr_per_rank": (["the ranks' optimisers differ (rank 0 lr=0.01, rank 1 lr=0.02)",
                     "same settings on every rank"], False),
    "no_sync_last": (["of the 2 micro-batches before optimizer.step() (line 33), the first "
                      "ran outside model.no_sync(), and the 1 after the last of those",
                      "never averaged", "must run outside it"],
                     False),
    "no_sync_on_the_closing_one": (["of the 3 micro-batches before optimizer.step() (line "
                                    "32), micro-batch(es) 1, 2 ran outside model.no_sync(), "
                                    "and the 1 after the last of those", "never averaged"],
                                   False),
    "no_sync_always": (["no backward before optimizer.step()", "ran outside model.no_sync()",
                        "never averaged"], False),
    "scheduler_on_rank0": (["the scheduler at line 30 stepped a different number of times",
                            "Step the scheduler on every rank"], True),
    "resume_on_rank0_later": (["rank(s) 0 loaded a state dict into the model (line 41)",
                               "rank(s) 1 did not", "Load on every rank"], True),
    "optimizer_part_per_rank": (["the ranks' optimisers hold different parameters",
                                 "rank 0: 4 tensor(s), rank 1: 2 tensor(s)"], False),
    "random_features_per_rank": (["keeps `projection` (a tensor of shape [2, 8])",
                                  "neither a parameter nor a buffer", "register_buffer"],
                                 False),
    "head_reset_after_wrap": (["every rank changed the wrapped model's parameters at line 13, "
                              "called from line 23, after DDP(...) had wrapped it",
                              "the ranks seeded torch.manual_seed differently at line 22: "
                              "1000 on rank 0, 1001 on rank 1",
                              "or make the change before DDP(...)"], True),
    "same_everywhere": (["parameters identical on every rank after 3 step(s)"], False),
    "grads_summed_after_ddp": (["all-reduce with SUM (line 16) the gradients that DDP's "
                                "backward had already averaged", "2 times the average",
                                "remove the all-reduce"], True),
}


def planted(path: Path) -> int | None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(r"# planted: model_wrapping", line):
            return number
    assert "Planted fault: none" in path.read_text(), path.name
    return None


def test_every_script_has_what_its_verdict_must_say():
    assert set(SAYS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_doctor_names_what_parted_the_ranks(name):
    line = planted(SCRIPTS / f"{name}.py")
    result = doctor.diagnose(SCRIPTS / f"{name}.py", 2)
    shown = str(result)
    assert not result.problem, shown
    model = result.stages["model_wrapping"]
    said, at_planted = SAYS[name]
    if line is None:
        assert result.faults == [] and result.failure is None, shown
        assert model.status == doctor.OK, shown
    else:
        assert result.faults == ["model_wrapping"], shown
        assert result.exit_code == 1, shown
        if at_planted:
            assert model.line == line, shown
    for words in said:
        assert words in model.evidence, shown
    assert "outside the module" not in model.evidence, shown


def test_a_plain_tensor_built_alike_on_every_rank_is_no_fault(tmp_path):
    source = (SCRIPTS / "random_features_per_rank.py").read_text()
    assert "    torch.manual_seed(11 + rank)\n" in source
    path = tmp_path / "features_alike.py"
    path.write_text(source.replace("torch.manual_seed(11 + rank)", "torch.manual_seed(11)"))
    result = doctor.diagnose(path, 2)
    assert result.exit_code == 0 and result.faults == [], str(result)
