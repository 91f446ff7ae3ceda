"""11_inside_ddp: the hand-built DDP against DDP, its overlap picture, and its exercise's check.

The workers are the notebook's own: every ``%%writefile`` cell of
``notebooks/11_inside_ddp.ipynb`` is written into a temporary ``workers``
package and launched for real, as the notebook launches it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ddp_lesson import devices, launch, sources
from ddp_lesson.exercises import checks
from ddp_lesson.stages import stage
from ddp_lesson.views import inside

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "11_inside_ddp.ipynb"
ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
SYNCING = stage("model_wrapping").title
WORLD = devices.plan().world_size
STEPS = 10
#: The tolerance the notebook states for one process on the global batch.
TOLERANCE = 1e-6

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """The notebook's worker modules, importable as ``workers.*``; yields ``workers.stage_11``."""
    folder = tmp_path_factory.mktemp("inside")
    (folder / "workers").mkdir()
    (folder / "workers" / "__init__.py").write_text("")
    for target, text in sources.writefile_cells(NOTEBOOK).items():
        (folder / target).write_text(text)
    stale = [m for m in sys.modules if m == "workers" or m.startswith("workers.")]
    for name in stale:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    import workers.stage_11 as stage_11

    yield stage_11
    sys.path.remove(str(folder))
    for name in [m for m in sys.modules if m == "workers" or m.startswith("workers.")]:
        del sys.modules[name]


def train(worker, how, ranks=WORLD, batch_size=32, bucket_cap_mb=None):
    return launch.run_ranks(
        worker.main, ranks, STEPS, how, batch_size, bucket_cap_mb, timeout_s=120
    )


def gap(runs, reference):
    first = reference[0]["params"]
    return max(float((r["params"] - first).abs().max()) for r in runs)


@pytest.fixture(scope="module")
def trained(worker):
    """Each way of synchronising, ten steps from the same seeds on the same batches."""
    return {
        "DDP": train(worker, "DDP"),
        "after backward": train(worker, "after backward"),
        "per parameter": train(worker, "per parameter"),
        "buckets": train(worker, "buckets", bucket_cap_mb=1),
        "alone": train(worker, "alone", ranks=1, batch_size=32 * WORLD),
    }


# -- the notebook's claims, from real launches -----------------------------------------
def test_hand_built_versions_train_exactly_like_ddp(trained):
    for how in ("after backward", "per parameter", "buckets"):
        largest = gap(trained[how], trained["DDP"])
        print(f"{how}: largest parameter difference from DDP after {STEPS} steps: {largest}")
        if WORLD & (WORLD - 1) == 0:  # a power of two: dividing is exact
            assert largest == 0.0, how
        else:
            assert largest < TOLERANCE, how


def test_one_process_on_the_global_batch_trains_like_ddp_within_rounding(trained):
    largest = gap(trained["alone"], trained["DDP"])
    print(f"one process on the global batch: largest parameter difference from DDP {largest}")
    assert largest < TOLERANCE
    # rounding, not luck: a single wrong batch would move the parameters by far more
    assert gap(trained["alone"], trained["after backward"]) < TOLERANCE


def test_with_three_ranks_hand_built_and_ddp_differ_only_in_the_last_bits(worker):
    # what the notebook says about world sizes that are not a power of two
    ddp, hand = train(worker, "DDP", ranks=3), train(worker, "after backward", ranks=3)
    largest = gap(hand, ddp)
    print(f"three ranks: largest parameter difference from DDP {largest}")
    assert 0.0 < largest < TOLERANCE


def test_all_reduces_per_step_are_counted_from_the_ranks(trained):
    counts = {how: r[0]["all_reduces"] for how, r in trained.items()}
    assert counts["per parameter"] == {1: 6, 2: 6, STEPS: 6}
    assert counts["after backward"] == {1: 6, 2: 6, STEPS: 6}
    assert counts["buckets"] == {1: 2, 2: 2, STEPS: 2}
    assert counts["DDP"] == {1: 1, 2: 2, STEPS: 2}  # one bucket until DDP rebuilds them
    assert counts["alone"] == {1: 0, 2: 0, STEPS: 0}


def test_gradients_become_ready_last_layer_first(trained):
    for report in trained["per parameter"]:
        layers = [inside.layer_of(n) for n in inside.ready_order(report["timeline"])]
        assert layers == sorted(layers, reverse=True), layers


# -- the overlap picture ------------------------------------------------------------------
def _bars(figure) -> dict[str, tuple[float, float]]:
    return {
        p.get_gid(): (p.get_x(), p.get_width())
        for p in figure.axes[0].patches
        if p.get_gid() is not None
    }


def test_overlap_picture_draws_what_the_ranks_measured(worker):
    view = inside.OverlapTimeline(worker.main, WORLD, how="per parameter").run()
    html, figure = view.renderings()
    bars = _bars(figure)
    # on the CPU all ranks read one clock: each rank is drawn from its own step's start
    first = min(r["timeline"]["origin"] for r in view.reports)
    for report in view.reports:
        rank, timeline = report["rank"], report["timeline"]
        shift = timeline["origin"] - first
        assert len(timeline["all_reduces"]) == 6
        for n, (start, end, _size) in enumerate(timeline["all_reduces"]):
            x, width = bars[f"rank{rank}-all_reduce-{n}"]
            assert x == pytest.approx(1e3 * (start + shift))
            assert width == pytest.approx(1e3 * (end - start))
        for layer, start, end in inside.layer_spans(timeline):
            x, width = bars[f"rank{rank}-backward-{layer}"]
            assert x == pytest.approx(1e3 * (start + shift))
            assert width == pytest.approx(1e3 * (end - start))
        assert bars[f"rank{rank}-forward"] == (
            pytest.approx(1e3 * shift),
            pytest.approx(1e3 * timeline["backward"]),
        )
    # measured, not constant: two processes never read the same clock values
    first, second = (r["timeline"] for r in view.reports[:2])
    assert first["ready"] != second["ready"]
    # and the picture follows its data: later moments, bars further right
    later = [
        {**r, "timeline": {**r["timeline"], "all_reduces": [
            (s + 0.5, e + 0.5, n) for s, e, n in r["timeline"]["all_reduces"]
        ]}}
        for r in view.reports
    ]  # fmt: skip
    moved = _bars(inside.overlap_picture(later))
    for gid, (x, width) in bars.items():
        if "all_reduce" in gid:
            assert moved[gid] == (pytest.approx(x + 500), pytest.approx(width))
    assert "5 of them started" in html.data and "last layer first" in html.data


def test_overlap_view_explains_a_bad_bucket_size_and_keeps_its_drawing(worker):
    view = inside.OverlapTimeline(worker.main, WORLD)
    before = view.label()
    view.controls["bucket_cap_mb"].value = "lots"
    assert "bucket cap must be a number of MB above 0" in view.message.value
    assert view.label() == before
    view.controls["bucket_cap_mb"].value = "0.01"
    assert view.settings["bucket_cap_mb"] == 0.01


def test_the_notebooks_workers_keep_every_exchanged_tensor_on_the_rank_device(worker):
    """What NCCL requires, checked on the CPU by tests/device_guard.py."""
    import device_guard

    # the broadcast, the buckets (flattened, all-reduced, copied back), and DDP's knobs
    for module, args in [
        ("workers.stage_11", (3, "buckets", 32, 1)),
        ("workers.stage_11_knobs", ()),
    ]:
        with launch.bounded(WORLD, timeout_s=60) as run:
            mp.spawn(device_guard.main, args=(WORLD, run.port, module, *args), nprocs=WORLD)


# -- the exercise's check -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("inside_no_divide.py", "the sum over the"),
        ("inside_no_wait.py", "never waited for"),
        ("inside_wrong_tensor.py", "line 14 (`pending.append((param, dist.all_reduce(param,"),
        ("inside_no_broadcast.py", "the initial broadcast was skipped"),
        ("inside_after_backward.py", "all started after backward had finished"),
        ("inside_weights_only.py", "linear_relu_stack.0.bias"),
        # right for a world of 2 alone: the check runs it in another world too
        ("inside_halved_by_hand.py", "run again in a world of"),
        # hooks attached again every step pile up: more all-reduces each step
        ("inside_hooks_each_step.py", "step 2 started 12: hooks registered after step 1 stay"),
    ],
)
def test_check_hooks_fails_wrong_answers_with_stage_and_line(answer, fragment):
    result = checks.check_hooks(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == SYNCING, str(result)
    assert fragment in str(result), str(result)
    assert f"{answer}, line " in result.fix, result.fix


def test_check_hooks_passes_a_right_answer_written_differently():
    result = checks.check_hooks(ANSWERS / "inside_futures.py")
    assert result, str(result)


@pytest.mark.skipif(devices.plan().device_type == "cuda", reason="three ranks need three GPUs")
def test_check_hooks_passes_the_solution_with_three_ranks(monkeypatch, tmp_path):
    # the solution divides after the sum, DDP multiplies by 1/3 before it: the
    # last bits differ, within the check's tolerance
    solution = sources.writefile_cells(ROOT / "solutions" / "11_inside_ddp.ipynb")
    answer = tmp_path / "exercise_11.py"
    answer.write_text(solution["workers/exercise_11.py"])
    monkeypatch.setenv(devices.WORLD_SIZE_ENV, "3")
    result = checks.check_hooks(answer)
    print(result)
    assert result and "3 ranks" in str(result), str(result)


def test_check_hooks_spots_a_stub_and_a_missing_file(tmp_path):
    stub = tmp_path / "exercise_11.py"
    stub.write_text(
        "def broadcast_parameters(model):\n"
        '    raise NotImplementedError("your code here")\n\n\n'
        "def attach_hooks(model):\n"
        '    raise NotImplementedError("your code here")\n\n\n'
        "def finish(model, pending):\n"
        '    raise NotImplementedError("your code here")\n'
    )
    assert checks.check_hooks(stub).status == checks.NOT_ATTEMPTED
    assert checks.check_hooks(tmp_path / "nowhere.py").status == checks.NOT_ATTEMPTED


def test_check_hooks_points_at_the_all_reduce_given_a_copy():
    answer = "msg4_hooks_sum_into_copy.py"
    result = checks.check_hooks(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == SYNCING, str(result)
    assert "neither a parameter nor its .grad" in result.happened, str(result)
    assert f"{answer}, line 16 (`started[param] = dist.all_reduce(copy" in result.fix, result.fix
    assert "def finish" not in result.fix, result.fix
