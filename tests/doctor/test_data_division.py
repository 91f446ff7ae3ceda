"""The doctor judges dividing the data from what the ranks consumed and the data sets they hold.

``scripts/styles/data_division/`` holds scripts whose data comes from an
IterableDataset (split by rank and loader worker, by rank only, not at
all) and scripts whose ranks build their data sets from per-rank or shared
seeds, or none. A faulty one marks the line that owns its fault with
``# planted: data_division``; a correct one says ``Planted fault: none``.
The doctor must get each one right, and give a fix that fits the data:
no sampler hint for an IterableDataset, the same data on every rank when
the ranks built different data sets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddp_lesson import doctor

SCRIPTS = Path(__file__).resolve().parent / "scripts" / "styles" / "data_division"
NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py"))

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: What each script's data-division verdict must say, and must not say.
SAYS = {
    # the one item past the last whole block is left out, as drop_last would: no fault
    "blocks_tail_dropped": (["its own 30 of 61 training items, no overlap"], ["never seen"]),
    "stream_rank_only": (
        ["rank 0 received each of its", "2 loader workers", "get_worker_info()"],
        ["DistributedSampler"],
    ),
    "stream_files_uneven": (
        ["rank 1's loader ran out after 4 batches in the first epoch",
         "rank 0's gave at least 5", "same number of steps on every rank"],
        ["DistributedSampler("],
    ),
    "weighted_draw_split": (["each rank drew its own 40 items with replacement"], ["differ at"]),
    "seed_helper_per_rank": (
        ["the ranks built different data sets", "rank 0 seeded random.seed, numpy.random.seed "
         "and torch.manual_seed with 7 (lines 19, 20, 21, called from line 28) and rank 1 with "
         "8"],
        [],
    ),
    "set_epoch_on_rank0_only": (
        ["in epoch 1 (not in epoch 0)", "set_epoch (line 19) ran on rank 0 only, never on "
         "rank 1", "(rank 0: 1, rank 1: 0)", "on every rank"],
        ["as set_epoch gave them"],
    ),
    "shard_then_sampler": (
        ["though they seeded their generators alike (line 14):", "divides each "
         "rank's own data set again (rank 0: 24 of 48, rank 1: 24 of 48 items)",
         "no rank trains on"],
        ["random data no line seeded"],
    ),
    "eval_padded_kept_local": (["its own 32 of 64 training items"], ["counts them twice"]),
    "epoch_offset_by_rank": (
        ["went to more than one rank", "DistributedSamplers were at different epochs (rank 0: "
         "0, rank 1: 1, as set_epoch gave them)", "give every rank the same epoch number"],
        [],
    ),
    "sampler_rank_defaulted": (
        ["went to more than one rank", "DistributedSamplers (line 15) were told the same rank "
         "(rank 0: rank=0, rank 1: rank=0)", "give each its own rank"],
        [],
    ),
    "stream_asks_group": (
        ["ranks 0 and 1 received the same", "asks the process group for the rank (line 19)",
         "worker processes", "Give the dataset the rank and world size in the training process"],
        ["DistributedSampler("],
    ),
    "stream_split": (["each rank received", "no item twice"], []),
    "stream_unsplit": (
        ["ranks 0 and 1 received the same", "split the stream by rank"],
        ["DistributedSampler("],
    ),
    "seeded_per_rank": (
        ["the ranks built different data sets", "rank 0's and rank 1's differ at item 0",
         "rank 0 seeded torch.manual_seed with 0", "and rank 1 with 1",
         "seed the data's generation the same on every rank"],
        [],
    ),
    "seeded_same": (["each rank's sampler gave it its own 40 of 80 training items"], ["differ"]),
    "shuffled_per_rank": (
        ["the ranks built different data sets", "seeded random.Random with 0"], []
    ),
    "epochs_counted_per_phase": (
        ["set_epoch (line 16) was given 0 again", "keeps counting"], ["too late"]
    ),
    "replicas_from_config": (
        ["never seen by any rank", "num_replicas=4 for a world of 2"],
        ["went to more than one rank", "do not overlap"],
    ),
    "sampler_seeded_per_rank": (
        ["went to more than one rank", "different seeds (rank 0: 3, rank 1: 4)",
         "give every rank the same seed"],
        [],
    ),
    "split_apart": (
        ["the ranks built different data sets", "out of the same items",
         "overlap and leave items out", "the same on every rank"],
        ["no line seeded"],
    ),
    "split_together": (["each rank's sampler gave it its own 24 of 48 training items"], ["differ"]),
    "generator_per_rank": (
        ["the ranks built different data sets", "rank 0 seeded torch.Generator.manual_seed "
         "with 100 (line 17, called from line 29) and rank 1 with 101"],
        ["no line seeded"],
    ),
    "generator_fixed": (["each rank's sampler gave it its own 32 of 64 training items"],
                        ["differ"]),
    "numpy_rng_per_rank": (
        ["the ranks built different data sets", "rank 0 seeded numpy.random.default_rng with 0"],
        ["no line seeded"],
    ),
    # toy data from an unseeded generator (PyTorch's examples): remarked on, not a fault
    "unseeded_random": (["its own 40 of 80", "data sets differ at item 0", "no line seeded"], []),
}


def planted(path: Path) -> int | None:
    """The line marked ``# planted: data_division``; None for a correct script."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(r"# planted: data_division", line):
            return number
    assert "Planted fault: none" in path.read_text(), path.name
    return None


def test_every_script_has_what_its_verdict_must_say():
    assert set(SAYS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_doctor_judges_what_the_ranks_consumed(name):
    line = planted(SCRIPTS / f"{name}.py")
    result = doctor.diagnose(SCRIPTS / f"{name}.py", 2)
    shown = str(result)
    assert not result.problem, shown
    data = result.stages["data_division"]
    if line is None:
        assert result.faults == [] and result.failure is None, shown
        assert [s.status for s in result.stages.values()] == [doctor.OK] * 5, shown
        assert result.exit_code == 0, shown
    else:
        assert result.faults == ["data_division"], shown
        assert data.line == line, shown
        assert result.exit_code == 1, shown
    said, unsaid = SAYS[name]
    for words in said:
        assert words in data.evidence, shown
    for words in unsaid:
        assert words not in data.evidence, shown


def test_a_split_by_hand_is_never_told_to_add_a_sampler():
    # the run ends at DDP(...) before any loader is iterated: what the ranks built (data
    # sets that differ by rank) rules out the code's guess that each reads all of it
    result = doctor.diagnose(SCRIPTS.parent.parent / "vocab_per_rank.py", 2)
    data = result.stages["data_division"]
    assert result.faults == ["model_wrapping"], str(result)
    assert "DistributedSampler" not in data.evidence, str(result)
