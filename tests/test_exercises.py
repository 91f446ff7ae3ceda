"""Exercises: generated from the solutions, and checked by behaviour.

For every exercise, wrong answers (mistakes a learner makes) must fail with
the stage that owns the fix, and a right answer written differently from the
solution must pass. File answers live in tests/exercise_answers/.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import socket
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ddp_lesson import data, devices, launch, models, sources
from ddp_lesson.exercises import checks
from ddp_lesson.exercises import generate as exercises
from ddp_lesson.exercises.checks import answers, base, faults
from ddp_lesson.stages import stage

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
PLAN = devices.plan()
#: What a machine without a GPU per rank judges on stand-in GPUs (with GPUs, on real ones).
ON_CPU = pytest.mark.skipif(PLAN.device_type == "cuda", reason="judged on real GPUs there")
STARTING, CONNECTING, SPLITTING, SYNCING, TEARDOWN = (
    stage(key).title
    for key in ("spawning", "process_group", "data_division", "model_wrapping", "teardown")
)
#: Lesson notebooks that teach a skill, each of which has exercises.
SKILLS = ["02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "18"]

#: Public checks that no exercise calls: the lesson notebook shows them at work.
LESSON_ONLY = {"check_slurm": "09_checkpoints"}

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.fixture
def short_deadline(monkeypatch):
    """For answers whose ranks never meet: end the check's launch sooner."""
    monkeypatch.setattr(base, "CHECK_TIMEOUT_S", 15)


@pytest.fixture(autouse=True)
def fresh_tries():
    """Every test starts with no wrong tries counted (a check reveals after a few)."""
    answers.forget()
    yield
    answers.forget()


def written(notebook: str, target: str, folder: Path) -> Path:
    """Write the file a solution notebook's ``%%writefile`` cell writes, into ``folder``."""
    text = sources.writefile_cells(ROOT / "solutions" / notebook)[f"workers/{target}"]
    path = folder / target
    path.write_text(text)
    return path


def stubbed(notebook: str, target: str, folder: Path) -> Path:
    """The same file as the generated exercise notebook writes it: with its stubs."""
    text = sources.writefile_cells(ROOT / "exercises" / notebook)[f"workers/{target}"]
    path = folder / target
    path.write_text(text)
    return path


# -- one source -------------------------------------------------------------------
def test_exercises_are_generated_byte_identically_from_solutions():
    assert exercises.generate(ROOT, check=True) == 0


def test_every_skill_notebook_has_exercises_with_the_lessons_stem():
    lessons = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    for number in SKILLS:
        (stem,) = [s for s in lessons if s.startswith(number)]  # one lesson per number
        assert (ROOT / "solutions" / f"{stem}.ipynb").is_file(), stem
        assert (ROOT / "exercises" / f"{stem}.ipynb").is_file(), stem


def called_checks(notebook: Path) -> set[str]:
    """The ``checks.check_*`` functions a notebook's code cells call."""
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return set(re.findall(r"\bchecks\.(check_\w+)\(", code))


def test_every_skill_has_a_graded_check_and_every_check_an_exercise():
    called = {}
    for number in SKILLS:
        (solution,) = (ROOT / "solutions").glob(f"{number}_*.ipynb")
        found = called_checks(solution)
        assert found, f"{solution.name} calls no check"
        called.update({name: solution.stem for name in found})
    public = {name for name in dir(checks) if name.startswith("check_")}
    known = set(called) | set(LESSON_ONLY)
    assert known == public, sorted(public ^ known)
    for name, lesson in LESSON_ONLY.items():
        assert name in called_checks(ROOT / "notebooks" / f"{lesson}.ipynb"), name


def test_exercise_cells_contain_no_solution():
    for path in (ROOT / "exercises").glob("*.ipynb"):
        text = path.read_text()
        assert exercises.BEGIN not in text and exercises.END not in text
        assert "YOUR CODE HERE" in text


def test_a_learners_edited_exercise_is_never_overwritten(tmp_path, capsys):
    shutil.copytree(
        ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("workers")
    )
    assert exercises.generate(tmp_path) == 0
    mine = tmp_path / "exercises" / "02_spawn.ipynb"
    notebook = json.loads(mine.read_text())
    notebook["cells"][3]["source"] = "world_size = 2  # my answer\n"
    mine.write_text(json.dumps(notebook))
    before = mine.read_text()
    # the solution changes, and the generator runs again
    solution = tmp_path / "solutions" / "02_spawn.ipynb"
    solution.write_text(solution.read_text().replace("Exercise 1: the world size", "Exercise 1"))
    assert exercises.generate(tmp_path) == 1
    assert mine.read_text() == before
    assert "has your edits, so it was left as it is" in capsys.readouterr().out


def test_an_untouched_exercise_is_regenerated(tmp_path):
    shutil.copytree(
        ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("workers")
    )
    exercises.generate(tmp_path)
    solution = tmp_path / "solutions" / "06_full_script.ipynb"
    solution.write_text(solution.read_text().replace("only one process trains", "one process"))
    assert exercises.generate(tmp_path) == 0
    assert "one process" in (tmp_path / "exercises" / "06_full_script.ipynb").read_text()


def test_unbalanced_markers_are_reported():
    with pytest.raises(ValueError, match="has no ### END SOLUTION"):
        exercises.strip_solutions("### BEGIN SOLUTION\nx = 1\n", "cell 3")
    with pytest.raises(ValueError, match="has no ### BEGIN SOLUTION before it"):
        exercises.strip_solutions("x = 1\n### END SOLUTION\n", "cell 3")


# -- stage 1: starting processes --------------------------------------------------
def start_right(main, world_size, port):
    mp.spawn(main, args=(world_size, port), nprocs=world_size)


def start_one_process(main, world_size, port):
    mp.spawn(main, args=(world_size, port), nprocs=1)


def start_rank_in_args(main, world_size, port):
    mp.spawn(main, args=(0, world_size, port), nprocs=world_size)


def start_positional(main, world_size, port):  # right, written differently
    mp.start_processes(main, (world_size, port), world_size, start_method="spawn")


#: torch's own start, bound when this file was imported: it starts past the check's launch
_start_bound_early = functools.partial(mp.start_processes, start_method="spawn", join=True)


def start_bound_early(main, world_size, port):  # right, through a partial made at import
    _start_bound_early(main, args=(world_size, port), nprocs=world_size)


def start_count_written_in(main, world_size, port):
    mp.spawn(main, args=(world_size, port), nprocs=PLAN.world_size)  # this machine's count, fixed


def start_each_then_wait(main, world_size, port):  # each process ends before the next
    context = mp.get_context("spawn")
    for rank in range(world_size):
        process = context.Process(target=main, args=(rank, world_size, port))
        process.start()
        process.join()


def start_fixed_port(main, world_size, port):  # the port written in, not the one given
    mp.spawn(main, args=(world_size, 12355), nprocs=world_size)


def start_port_as_text(main, world_size, port):  # right: the port as MASTER_PORT takes it
    mp.spawn(main, args=(world_size, str(port)), nprocs=world_size)


def start_without_waiting(main, world_size, port):  # hands back the context, never joined
    return mp.start_processes(main, (world_size, port), nprocs=world_size, join=False)


def start_stub(main, world_size, port):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize(
    ("start", "world_size", "fragment"),
    [
        # "how many processes does it start"; where a busy machine
        # keeps the one rank from reporting before the check's deadline, the
        # deadline's message says "pass nprocs=world_size to mp.spawn"
        (start_one_process, PLAN.world_size, ("how many processes", "nprocs")),
        (start_rank_in_args, PLAN.world_size, "which of main's arguments does args= hold"),
        (start_right, 0, "torch.cuda.device_count() is 0"),
        # right for this machine's world size alone: called again with another, it starts
        # the same count
        (start_count_written_in, PLAN.world_size, "called again as start(main, "),
        # every rank once, told the right world size, but never two running at once
        (start_each_then_wait, PLAN.world_size, "the processes ran one after another"),
        (start_fixed_port, PLAN.world_size, "main was given port 12355, not the one start()"),
        (start_without_waiting, PLAN.world_size, "start() returned while 2 of the processes"),
    ],
)
def test_check_spawn_fails_wrong_answers(start, world_size, fragment):
    result = checks.check_spawn(start, world_size)
    assert result.status == checks.FAILED and result.stage == "starting processes", str(result)
    fragments = fragment if isinstance(fragment, tuple) else (fragment,)
    assert any(f in str(result) for f in fragments), str(result)


def test_a_port_written_in_is_named_though_another_program_listens_there():
    # a program of the machine's own on that port (here a plain listener, as a stale run or
    # another notebook's rank would be): the check never waits on it
    with contextlib.ExitStack() as held:
        listener = held.enter_context(socket.socket())
        with contextlib.suppress(OSError):  # (already held by another: the same case)
            listener.bind(("127.0.0.1", 12355))
            listener.listen()
        result = checks.check_spawn(start_fixed_port, PLAN.world_size)
    assert "main was given port 12355, not the one start()" in result.happened, str(result)


def test_check_spawn_names_the_main_start_was_given_not_the_checks_own():
    result = checks.check_spawn(start_rank_in_args, PLAN.world_size)
    assert "main() takes 3 positional arguments but 4 were given" in result.happened, str(result)
    assert "report_rank" not in str(result)


def test_check_spawn_passes_a_right_answer_and_spots_stubs():
    assert checks.check_spawn(start_positional, PLAN.world_size)
    assert checks.check_spawn(start_bound_early, PLAN.world_size)
    assert checks.check_spawn(start_port_as_text, PLAN.world_size)
    assert checks.check_spawn(start_stub, PLAN.world_size).status == checks.NOT_ATTEMPTED
    assert checks.check_spawn(start_right, ...).status == checks.NOT_ATTEMPTED


@pytest.mark.parametrize(
    ("check", "right", "wrong", "stage_title"),
    [
        # the solutions answer "b"; a capital and spaces around it are the same answer
        (checks.check_nprocs_zero, " B ", ["a", "c", "b c"], STARTING),
        (checks.check_easy, "B\n", ["a", "c", "ab"], SPLITTING),
    ],
)
def test_multiple_choice_checks(check, right, wrong, stage_title):
    assert check(right)
    for answer in wrong:
        result = check(answer)
        assert result.status == checks.FAILED and result.stage == stage_title, str(result)
    assert check(...).status == checks.NOT_ATTEMPTED


def test_a_multiple_choice_check_keeps_the_right_letter_back_at_first():
    # answered in a style of its own: the letter in parentheses, as a quiz sheet has it
    first = checks.check_nprocs_zero("(a)")
    assert not first and "expected: another letter" in str(first), str(first)
    assert "reveal=True" in first.fix, first.fix
    assert "expected: b" in str(checks.check_nprocs_zero("(a)", reveal=True))
    answers.forget()
    said = [str(checks.check_nprocs_zero(letter)) for letter in ("(a)", "c", "a")]
    assert ["expected: b" in text for text in said] == [False, False, True], said


# -- stage 2: connecting processes --------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "stage", "fragment", "deadline_s"),
    [
        # its ranks never meet (nobody serves the port it writes): any deadline
        # ends it with the same verdict, and it holds the fixed port's lock meanwhile
        # (the lines that fix them are kept back on a first try: see
        # test_file_checks_keep_the_fixing_line_back_until_asked_or_tried_again)
        pytest.param(
            "pg_fixed_port.py",
            CONNECTING,
            "the port ddp_setup was given",
            5,
            marks=pytest.mark.fixed_port,
        ),
        ("pg_every_rank_zero.py", CONNECTING, "", 15),
        # whatever it raises, the fix is the test it never called
        pytest.param(
            "pg_device_test_uncalled.py",
            CONNECTING,
            "line 13 (`if torch.cuda.is_available:`) names a test without calling it",
            15,
            marks=ON_CPU,
        ),
        ("pg_no_destroy.py", "teardown", "must be released", 15),
        # right on this machine: given a GPU per rank (stand-ins), they are not
        pytest.param(
            "pg_gpu_never_selected.py",
            CONNECTING,
            "(given a GPU of its own, a stand-in) selected nothing",
            15,
            marks=ON_CPU,
        ),
        pytest.param(
            "pg_gloo_everywhere.py",
            CONNECTING,
            "asked init_process_group for 'gloo'",
            15,
            marks=ON_CPU,
        ),
        pytest.param(
            "pg_any_gpu_means_nccl.py",
            CONNECTING,
            "process 1 selected cuda:1, a GPU that machine does not have",
            15,
            marks=ON_CPU,
        ),
    ],
)
def test_check_process_group_fails_wrong_answers(answer, stage, fragment, deadline_s, monkeypatch):
    monkeypatch.setattr(base, "CHECK_TIMEOUT_S", deadline_s)
    started = time.monotonic()
    result = checks.check_process_group(ANSWERS / answer)
    assert time.monotonic() - started < checks.CHECK_TIMEOUT_S + 15
    assert result.status == checks.FAILED and result.stage == stage, str(result)
    assert fragment in str(result)


@pytest.mark.parametrize(
    "answer", ["pg_tcp_init_method.py", "pg_reference_rewritten.py", "pg_dataclass_settings.py"]
)
def test_check_process_group_passes_a_right_answer(answer):
    result = checks.check_process_group(ANSWERS / answer)
    assert result, str(result)


def test_check_of_a_missing_file_says_which_cell_to_run(tmp_path):
    result = checks.check_process_group(tmp_path / "nowhere.py")
    assert result.status == checks.NOT_ATTEMPTED and "%%writefile" in str(result)


# -- stage 3: splitting the data ----------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("sampler_missing.py", "every rank iterated all 10 items"),
        ("sampler_no_set_epoch.py", "nothing told it that the epoch changed"),
        ("sampler_no_shuffle.py", "in the order they are stored"),
        # equal shares that leave items out, and what the run saw drop them
        ("sampler_loader_drops_leftovers.py", "no rank; the DataLoader had drop_last"),
        # set_epoch is called: the message says with what, and when
        ("sampler_set_epoch_constant.py", "set_epoch was called 2 time(s), each time with 5"),
        ("sampler_set_epoch_late.py", "each time after a pass over the loader"),
    ],
)
def test_check_sampler_fails_wrong_answers(answer, fragment):
    result = checks.check_sampler(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == SPLITTING, str(result)
    assert fragment in str(result)


def test_check_sampler_passes_a_right_answer():
    assert checks.check_sampler(ANSWERS / "sampler_separate_variable.py")


PREDICTION = dict(size=10, world_size=3, rank=2, shuffle=False)


@pytest.mark.parametrize(
    ("predicted", "fragment"),
    [
        ([2, 5, 8], "the length"),
        ([2, 5, 8, 9], "the padding repeats"),
        ([1, 4, 7, 0], "rank 1's list"),
        ([8, 9, 0, 1], "consecutive blocks"),
        ([8, 5, 2, 1], "wrong order"),
    ],
)
def test_check_sampler_prediction_says_what_is_wrong_without_the_answer(predicted, fragment):
    result = checks.check_sampler_prediction(predicted, **PREDICTION)
    assert result.status == checks.FAILED and result.stage == SPLITTING
    assert fragment in str(result), str(result)
    assert "[2, 5, 8, 1]" not in str(result), "the first wrong try must not show the answer"


def test_check_sampler_prediction_reveals_after_three_tries_or_on_request():
    for _ in range(2):
        assert "[2, 5, 8, 1]" not in str(checks.check_sampler_prediction([2], **PREDICTION))
    assert "[2, 5, 8, 1]" in str(checks.check_sampler_prediction([2], **PREDICTION))
    answers.forget()
    assert "[2, 5, 8, 1]" in str(checks.check_sampler_prediction([2], reveal=True, **PREDICTION))


def test_check_sampler_prediction_passes_a_right_answer():
    assert checks.check_sampler_prediction((2, 5, 8, 1), **PREDICTION)
    assert checks.check_sampler_prediction(..., **PREDICTION).status == checks.NOT_ATTEMPTED


# -- stage 4: synchronising the model -------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("wrap_missing.py", "wrap returned a NeuralNetwork"),
        # the wrapper is built (so the weights were broadcast) but thrown away
        ("wrap_returns_inner.py", "gradients differ by up to"),
        # a DDP wrapper on every rank, told not to copy rank 0's weights as it wraps
        ("wrap_no_first_copy.py", "wrap returned a DistributedDataParallel on every rank, yet"),
        pytest.param(
            "wrap_gpu_form_on_cpu.py",
            "a model on the CPU has none",
            marks=pytest.mark.skipif(PLAN.device_type == "cuda", reason="right on GPUs"),
        ),
        # the plain run on the CPU cannot tell these: a stand-in GPU per rank can
        pytest.param(
            "wrap_never_moved.py",
            "rank 0's model stayed where it was made, on the CPU",
            marks=ON_CPU,
        ),
        pytest.param(
            "wrap_first_gpu_everywhere.py",
            "rank 1's model was sent to cuda:0, not to cuda:1",
            marks=ON_CPU,
        ),
        pytest.param(
            "wrap_moved_after_wrapping.py",
            "only after DDP(...) had wrapped it on the CPU",
            marks=ON_CPU,
        ),
        pytest.param(
            "wrap_first_gpu_ids.py",
            "on rank 1, DDP(...) was told the model is on cuda:0",
            marks=ON_CPU,
        ),
    ],
)
def test_check_wrap_fails_wrong_answers(answer, fragment):
    result = checks.check_wrap(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == SYNCING, str(result)
    assert fragment in str(result)


@pytest.mark.parametrize("answer", ["wrap_one_expression.py", "wrap_selects_then_cuda.py"])
def test_check_wrap_passes_a_right_answer(answer):
    result = checks.check_wrap(ANSWERS / answer)
    assert result, str(result)


# -- fault finding: the MEDIUM exercise (06) and the suspects (07) -------------------
@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """The planted scripts, as the solution notebooks write them."""
    folder = tmp_path_factory.mktemp("planted")
    found = {"teammate": written("06_full_script.ipynb", "teammate.py", folder)}
    for name in ("suspect_a", "suspect_b", "suspect_c"):
        found[name] = written("07_mistakes.ipynb", f"{name}.py", folder)
    return found


def owner(path: Path) -> tuple[int, str]:
    """The owning line of a planted script: its number and its text."""
    line = answers.line_of(path, faults.PLANTED[path.stem].owner)
    return line, path.read_text().splitlines()[line - 1]


@pytest.mark.parametrize(
    ("name", "stage_name", "line", "fragment"),
    [
        # the right stage, and the line next to the fault
        ("teammate", "starting processes", "nprocs=world_size)", "which value"),
        # a word that is on several lines is not a line
        ("teammate", "spawning", "world_size", "is on lines"),
        ("teammate", "splitting the data", "WORLD_SIZE", "the stage whose code"),
        ("suspect_a", "splitting the data", "sampler = DistributedSampler(", "sampler itself"),
        ("suspect_a", "synchronising the model", "shuffle=True", "the stage whose code"),
        ("suspect_b", "synchronising the model", "argmax(dim=1)", "Where does skipping"),
        ("suspect_b", "synchronising the model", "model.module(", "is on lines"),
        ("suspect_c", "teardown", "barrier()", "the stage whose code"),
        ("suspect_c", "connecting processes", "if rank == 0:", "What else did it capture"),
    ],
)
def test_fault_checks_fail_wrong_answers_without_the_answer(
    planted, name, stage_name, line, fragment
):
    path = planted[name]
    if name == "teammate":
        result = checks.check_medium(stage_name, line, path)
    else:
        result = checks.check_suspect(path, stage_name, line)
    assert result.status == checks.FAILED, str(result)
    assert fragment in str(result), str(result)
    number, text = owner(path)
    assert f"line {number}" not in str(result) and text.strip() not in str(result)
    right = stage(faults.PLANTED[name].key).title
    if answers.stage_named(stage_name) == faults.PLANTED[name].key:
        assert result.stage == right and not result.stage_hidden, str(result)
    else:  # the stage is the learner's to find: none is named, and the message says so
        assert result.stage is None and result.stage_hidden, repr(result.stage)
        assert f"(stage: {base.HIDDEN})" in str(result), str(result)


@pytest.mark.parametrize("name", ["teammate", "suspect_a", "suspect_b", "suspect_c"])
def test_fault_checks_pass_the_owning_line_by_number_or_by_text(planted, name):
    path = planted[name]
    key = faults.PLANTED[name].key
    number, text = owner(path)

    def check(stage_name, line):
        if name == "teammate":
            return checks.check_medium(stage_name, line, path)
        return checks.check_suspect(path, stage_name, line)

    assert check(stage(key).title.upper(), number)
    assert check(key, f"  {text.strip()}   # copied with a comment")
    assert check(..., number).status == checks.NOT_ATTEMPTED


@pytest.mark.parametrize("name", ["teammate", "suspect_a", "suspect_b", "suspect_c"])
def test_fault_checks_accept_no_line_but_the_owning_one(planted, name):
    """With the right stage, every other line fails: by its number, and by its whole text."""
    path = planted[name]
    key = faults.PLANTED[name].key
    number, _ = owner(path)
    owning = answers.statement_span(path, number)
    lines = path.read_text().splitlines()
    normals = [answers.normal(t) for t in lines]
    unique = {t for t in normals if normals.count(t) == 1}

    def check(line):
        answers.forget()
        if name == "teammate":
            return checks.check_medium(stage(key).title, line, path)
        return checks.check_suspect(path, stage(key).title, line)

    accepted = [n for n in range(1, len(lines) + 1) if check(n)]
    assert accepted == list(owning), accepted
    by_text = [
        n for n, text in enumerate(lines, 1) if answers.normal(text) in unique and check(text)
    ]
    assert by_text == list(owning), by_text
    # a word of the owning line that other lines share names no line at all
    for word in faults.PLANTED[name].owner.replace("(", " ").replace(")", " ").split():
        if sum(answers.normal(word) in answers.normal(t) for t in lines) > 1:
            result = check(word)
            assert not result and "is on lines" in str(result), (word, str(result))


def test_the_medium_script_finishes_but_only_one_process_trains(planted, tmp_path, monkeypatch):
    """The teammate's script, run with ``python`` as the exercise runs it, shows the symptom.

    Only its fixed MASTER_PORT is changed, to a free one, so that a busy
    port cannot make it fail for another reason.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    text = planted["teammate"].read_text()
    assert text.count('"12355"') == 1
    script = tmp_path / "teammate.py"
    script.write_text(text.replace('"12355"', f'"{port}"'))
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # `python teammate.py` sets none
    output = launch.run_script(script, timeout_s=120)  # raises if it fails or hangs
    said = re.findall(r"rank (\d+) of (\d+), epoch (\d+): (\d+) batches", output)
    whole = -(-len(data.digits("train")) // 32)  # the batches of the whole training set
    assert said == [("0", "1", "0", str(whole)), ("0", "1", "1", str(whole))], output


def test_fault_checks_show_the_answer_after_three_wrong_tries_or_on_request(planted):
    path = planted["suspect_a"]
    number, _ = owner(path)
    for _ in range(2):
        assert f"line {number}" not in str(checks.check_suspect(path, "teardown", 1))
    assert f"line {number}" in str(checks.check_suspect(path, "teardown", 1))
    answers.forget()
    result = checks.check_suspect(path, "teardown", 1, reveal=True)
    assert f"line {number}" in str(result) and result.stage == SPLITTING


def test_fault_check_of_a_file_that_was_not_planted(tmp_path):
    other = tmp_path / "mine.py"
    other.write_text("x = 1\n")
    result = checks.check_suspect(other, "teardown", 1)
    assert result.status == checks.FAILED
    # no stage owns this: none is named, and none is said to be hidden
    assert result.stage is None and not result.stage_hidden, repr(result)
    assert str(result).splitlines()[0] == "FAILED check_suspect", str(result)
    assert checks.check_suspect(tmp_path / "nowhere.py", "teardown", 1).status == (
        checks.NOT_ATTEMPTED
    )


# -- the whole script (06) ------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "stage_title", "fragment"),
    [
        ("script_spawn_unguarded.py", STARTING, "outside the __main__ block"),
        ("script_one_process.py", STARTING, "nprocs=1 on this machine"),
        ("script_no_rank.py", CONNECTING, "RANK expected"),
        # the doctor's evidence is its own; the check says what the stage must show
        ("script_no_sampler.py", SPLITTING, "each rank its own shard"),
        ("script_sampler_unshuffled.py", SPLITTING, "the same order in each of"),
        ("script_no_wrap.py", SYNCING, "one DDP-wrapped model"),
        ("script_no_destroy.py", TEARDOWN, "releases the group"),
        ("script_setup_renamed.py", CONNECTING, "the script has no function called ddp_setup"),
        pytest.param(
            "script_loss_times_ranks.py",
            SYNCING,
            "summed over the ranks on top of DDP's",
            marks=pytest.mark.skipif(PLAN.world_size < 2, reason="one rank: a sum is the mean"),
        ),
    ],
)
def test_check_ddp_script_fails_wrong_conversions_at_their_stage(answer, stage_title, fragment):
    result = checks.check_ddp_script(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)
    assert fragment in str(result), str(result)


def test_check_ddp_script_passes_a_conversion_written_independently():
    result = checks.check_ddp_script(ANSWERS / "script_right_independent.py")
    assert result, str(result)


def test_check_ddp_script_points_at_a_set_epoch_that_is_given_the_same_epoch():
    """set_epoch(0) in every epoch: it is called, with a constant; the check says so, at the call.

    (The doctor's verdict alone said "set_epoch was never called", at the DataLoader.)
    """
    path = ANSWERS / "script_set_epoch_constant.py"
    result = checks.check_ddp_script(path)
    assert result.status == checks.FAILED and result.stage == SPLITTING, str(result)
    assert "never called" not in str(result), str(result)
    assert "set_epoch is called" in result.happened, str(result)
    assert "the same epoch every time, 0" in result.happened, str(result)
    line = answers.line_of(path, "loader.sampler.set_epoch(0)")
    assert result.fix.startswith(f"line {line}: loader.sampler.set_epoch(0)"), result.fix
    assert "set_epoch(epoch)" not in str(result), "the first try does not show the line"
    revealed = checks.check_ddp_script(path, reveal=True)
    assert "; the fix: set_epoch(epoch) on the sampler the DataLoader" in revealed.fix, revealed


def test_check_ddp_script_spots_the_exercise_stubs(tmp_path):
    path = stubbed("06_full_script.ipynb", "my_ddp_script.py", tmp_path)
    assert checks.check_ddp_script(path).status == checks.NOT_ATTEMPTED
    assert checks.check_ddp_script(tmp_path / "nowhere.py").status == checks.NOT_ATTEMPTED


# -- one worker, two launchers (08) --------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "stage_title", "fragment"),
    [
        ("launchers_global_device.py", CONNECTING, "LOCAL_RANK (which GPU of its own node"),
        ("launchers_gpus_for_the_world.py", CONNECTING, "against how many processes did it"),
        ("launchers_main_forgets_local.py", STARTING, "KeyError: 'LOCAL_RANK'"),
        ("launchers_local_as_rank.py", CONNECTING, "global rank"),
        ("launchers_fixed_port.py", STARTING, "not at the port main was given"),
        ("launchers_main_no_address.py", STARTING, "found no MASTER_ADDR in the environment"),
    ],
)
@pytest.mark.usefixtures("short_deadline")
def test_check_launchers_fails_wrong_answers(answer, stage_title, fragment):
    result = checks.check_launchers(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)
    assert fragment in str(result), str(result)


def test_check_launchers_passes_a_right_answer_and_spots_stubs(tmp_path):
    assert checks.check_launchers(ANSWERS / "launchers_right_explicit.py")
    path = stubbed("08_torchrun.ipynb", "exercise_08.py", tmp_path)
    assert checks.check_launchers(path).status == checks.NOT_ATTEMPTED


@pytest.mark.skipif(PLAN.world_size < 2, reason="one process is local rank 0 anyway")
def test_check_launchers_fails_a_main_that_gives_every_process_local_rank_zero():
    """Without GPUs every process under mp.spawn takes the CPU whatever LOCAL_RANK says.

    So the check compares the LOCAL_RANK and LOCAL_WORLD_SIZE that main set
    with the rank and the world size; with a GPU per process this main
    would put every rank on cuda:0. (Before, the check passed it.)
    """
    result = checks.check_launchers(ANSWERS / "launchers_main_local_zero.py")
    assert result.status == checks.FAILED and result.stage == STARTING, str(result)
    assert "process 1: LOCAL_RANK=0, LOCAL_WORLD_SIZE=" in result.happened, str(result)
    assert "would all drive cuda:0" in result.happened, str(result)
    assert result.fix.startswith("main, where it sets LOCAL_RANK"), result.fix
    assert "str(rank)" not in str(result), "the first try does not show the line"


# -- checkpoints (09) ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "stage_title", "fragment"),
    [
        ("checkpoint_no_barrier.py", CONNECTING, "while rank 0 was still writing it"),
        ("checkpoint_wrapper_names.py", SYNCING, "module.linear_relu_stack"),
        ("checkpoint_no_optimizer.py", SYNCING, "parameters differ"),
        ("checkpoint_every_rank_writes.py", SYNCING, "saves per rank [3, 3"),
        ("checkpoint_no_map_location.py", SYNCING, "without it"),
        # a rank alone in a collective: gloo's words vary with the timing, the check's do not
        pytest.param(
            "checkpoint_barrier_rank0_only.py",
            CONNECTING,
            "the same collectives in the same",
            marks=pytest.mark.skipif(PLAN.world_size < 2, reason="one rank waits for no other"),
        ),
        pytest.param(
            "checkpoint_rank0_reads.py",
            SYNCING,
            "to return the same epoch on every rank",
            marks=pytest.mark.skipif(PLAN.world_size < 2, reason="one rank reads it anyway"),
        ),
    ],
)
def test_check_checkpoint_fails_wrong_answers(answer, stage_title, fragment):
    result = checks.check_checkpoint(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)
    assert fragment in str(result), str(result)


def test_check_checkpoint_passes_a_right_answer_and_spots_stubs(tmp_path):
    assert checks.check_checkpoint(ANSWERS / "checkpoint_right_plain.py")
    path = stubbed("09_checkpoints.ipynb", "exercise_09.py", tmp_path)
    assert checks.check_checkpoint(path).status == checks.NOT_ATTEMPTED


# -- the SLURM batch script (09's lesson notebook shows the check at work) ---------------
def train_arguments(argv):
    """The argument parser of a worker that is not the lesson's."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--checkpoint", required=True)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("--ntasks-per-node 1", "--ntasks-per-node 2", "srun would start 2 torchruns on each"),
        ("--ntasks-per-node 1", "--ntasks 2", "--ntasks-per-node=1 is missing"),
        ("srun torchrun", "srun --ntasks-per-node=3 torchrun", "would start 3 torchruns"),
        ("--gpus-per-node a100:2", "--gpus-per-node a100:4", "not one rank per GPU"),
        ("--nnodes ${SLURM_NNODES}", "--nnodes 2", "not the allocation's --nodes"),
        ("--epochs 3", "--epochs three", "rejects its arguments"),
        ('"${first}:29400"', "localhost:29400", "loopback address"),
        ('"${first}:29400"', "127.0.0.1:29400", "loopback address"),
    ],
)
def test_check_slurm_reads_options_written_with_a_space(tmp_path, old, new, words):
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text()
    assert text.count(old) == 1
    path = tmp_path / "job.slurm"
    path.write_text(text.replace(old, new))
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result.status == checks.FAILED and result.stage == STARTING, str(result)
    assert words in result.happened, str(result)


@pytest.mark.parametrize(
    ("fresh_store", "passes"),
    [
        ("", False),
        ("# TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 would be needed\n", False),
        ("export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n", True),
        ("srun --export=ALL,TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 ", True),
        ("after srun", False),
        ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n", False),  # not exported: srun never sees it
        ("set -a\nTORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n", True),
    ],
)
def test_check_slurm_wants_a_fresh_store_when_torchrun_may_restart(tmp_path, fresh_store, passes):
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text()
    text = text.replace("--rdzv-id", "--max-restarts 2 --rdzv-id")
    if fresh_store.startswith("srun"):
        text = text.replace("srun ", fresh_store)
    elif fresh_store == "after srun":  # set once torchrun has already run: too late
        text += "\nexport TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n"
    else:
        text = text.replace("first=$(", fresh_store + "first=$(")
    path = tmp_path / "job.slurm"
    path.write_text(text)
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert bool(result) == passes, str(result)
    if not passes:
        assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in result.happened, str(result)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # one task per node said on the srun line instead of in #SBATCH
        ("#SBATCH --ntasks-per-node 1   # one torchrun per node\n", ""),
        # as many tasks as nodes: one on each
        ("--ntasks-per-node 1 ", "--ntasks 3 "),
    ],
)
def test_check_slurm_takes_one_task_per_node_however_it_is_said(tmp_path, old, new):
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text()
    assert text.count(old) == 1
    text = text.replace(old, new)
    if not new:
        text = text.replace("srun torchrun", "srun --ntasks-per-node=1 torchrun")
    path = tmp_path / "job.slurm"
    path.write_text(text)
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result, str(result)


@pytest.mark.parametrize(
    ("gpus", "words", "passes"),
    [
        ("a100:2", '"$SLURM_GPUS_ON_NODE"', True),
        ("2", "${SLURM_GPUS_PER_NODE}", True),
        # a typed request makes SLURM_GPUS_PER_NODE "a100:2", which torchrun cannot read
        ("a100:2", "$SLURM_GPUS_PER_NODE", False),
    ],
)
def test_check_slurm_takes_slurms_own_gpu_count_per_node(tmp_path, gpus, words, passes):
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text()
    text = text.replace("--gpus-per-node a100:2", f"--gpus-per-node {gpus}")
    path = tmp_path / "job.slurm"
    path.write_text(text.replace("--nproc-per-node 2", f"--nproc-per-node {words}"))
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert bool(result) == passes, str(result)


def test_check_slurm_takes_the_node_count_under_either_of_slurms_names(tmp_path):
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text()
    path = tmp_path / "job.slurm"
    path.write_text(text.replace("${SLURM_NNODES}", '"$SLURM_JOB_NUM_NODES"'))
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result, str(result)


def test_check_slurm_passes_a_batch_script_written_differently():
    path = ANSWERS / "slurm_right_spaced.slurm"
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result, str(result)
    assert "nodes: 3" in result.note and "one per GPU (2 GPUs" in result.note, result.note


def test_check_slurm_names_the_script_in_its_argument_errors(tmp_path):
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text().replace("--epochs 3", "--steps 3")
    path = tmp_path / "job.slurm"
    path.write_text(text)
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert "usage: train.py" in result.happened, str(result)


def slurm_job(tmp_path, *changes):
    """slurm_right_spaced.slurm with each ``(old, new)`` change made once, written to a file."""
    text = (ANSWERS / "slurm_right_spaced.slurm").read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "job.slurm"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "changes",
    [
        [("#SBATCH --gpus-per-node a100:2\n", "")],
        [("#SBATCH --gpus-per-node a100:2\n", ""), ("--nproc-per-node 2", "--nproc-per-node gpu")],
        [("--gpus-per-node a100:2", "--gpus-per-node 0")],
    ],
)
def test_check_slurm_fails_a_job_that_asks_for_no_gpu(tmp_path, changes):
    result = checks.check_slurm(slurm_job(tmp_path, *changes), "workers/train.py", train_arguments)
    assert result.status == checks.FAILED and result.stage == STARTING, str(result)
    assert "asks SLURM for no GPU" in result.happened, str(result)


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        ("--gres gpu:2", "2 GPUs per node from --gres=gpu:2"),
        ("--gres=gpu:a100:2", "2 GPUs per node from --gres=gpu:a100:2"),
        ("--gpus 6", "2 GPUs per node from --gpus=6 over --nodes=3"),
        ("-G 6", "2 GPUs per node from --gpus=6 over --nodes=3"),
        ("--gpus-per-task=a100:2", "2 GPUs per node from --gpus-per-task=a100:2"),
    ],
)
def test_check_slurm_reads_every_way_to_ask_for_gpus(tmp_path, request_, said):
    path = slurm_job(tmp_path, ("--gpus-per-node a100:2", request_))
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result and f"one per GPU ({said}," in result.note, str(result)


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        ("--gres=gpu:4", "(#SBATCH --gres=gpu:4 is 4 GPUs per node;"),
        ("--gpus 8", "#SBATCH --gpus=8 does not say how many GPUs each node gets"),
    ],
)
def test_check_slurm_says_which_gpu_request_it_read(tmp_path, request_, words):
    path = slurm_job(tmp_path, ("--gpus-per-node a100:2", request_))
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result.status == checks.FAILED and words in result.happened, str(result)


@pytest.mark.parametrize("nodes", ["-N 3", "-N3", "-N\t3  # three nodes"])
def test_check_slurm_reads_short_sbatch_options(tmp_path, nodes):
    changes = [("--nodes 3", nodes), ("--job-name ddp-check", "-J ddp-check"), ("--time", "-t")]
    changes.append(("--nnodes ${SLURM_NNODES}", "--nnodes 3"))
    result = checks.check_slurm(slurm_job(tmp_path, *changes), "workers/train.py", train_arguments)
    assert result and "nodes: 3," in result.note, str(result)
    wrong = slurm_job(tmp_path, ("--nodes 3", nodes), ("--nnodes ${SLURM_NNODES}", "--nnodes 2"))
    result = checks.check_slurm(wrong, "workers/train.py", train_arguments)
    assert "--nnodes=2 is not the allocation's --nodes" in result.happened, str(result)


@pytest.mark.parametrize(
    ("before", "words"),
    [
        ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 srun ", None),
        ("OMP_NUM_THREADS=4 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 srun ", None),
        ("env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 srun ", None),
        ("OMP_NUM_THREADS=4 srun ", "without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"),
        ("OMP_NUM_THREADS=4 ", "torchrun is not started by srun"),
    ],
)
def test_check_slurm_reads_variables_set_in_front_of_srun(tmp_path, before, words):
    path = slurm_job(tmp_path, ("srun ", before), ("--rdzv-id", "--max-restarts 2 --rdzv-id"))
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert bool(result) == (words is None), str(result)
    assert words is None or words in result.happened, str(result)
    assert "not started by srun" not in str(result) or "srun" not in before, str(result)


def test_check_slurm_passes_a_batch_script_written_with_short_options():
    path = ANSWERS / "slurm_right_short_options.slurm"
    result = checks.check_slurm(path, "workers/train.py", train_arguments)
    assert result, str(result)
    assert "nodes: 2," in result.note and "4 GPUs per node from --gres=gpu:v100:4" in result.note


# -- predictions of measurements (10) ---------------------------------------------------
def test_check_exchange_prediction():
    grads = sum(p.numel() for p in models.NeuralNetwork().parameters())
    assert checks.check_exchange_prediction(grads * 4 / 2**20)
    for wrong, fragment in [(grads * 4 * 64 / 2**20, "too high"), (0.3, "too low")]:
        result = checks.check_exchange_prediction(wrong)
        assert result.status == checks.FAILED and result.stage == SYNCING
        assert fragment in str(result) and "1.15 MB" not in str(result), str(result)
    halved = checks.check_exchange_prediction(grads * 4 / 2**20 / PLAN.world_size)
    assert "by the world size" in str(halved), str(halved)
    assert "1.15 MB" in str(halved), "the third wrong try shows the measurement"
    assert checks.check_exchange_prediction(...).status == checks.NOT_ATTEMPTED
    assert checks.check_exchange_prediction("a lot").status == checks.FAILED


def test_check_allreduce_prediction():
    assert checks.check_allreduce_prediction(1)
    for wrong, fragment in [(16, "too high"), (0.05, "too low")]:
        result = checks.check_allreduce_prediction(wrong)
        assert result.status == checks.FAILED and result.stage == SYNCING, str(result)
        assert fragment in str(result), str(result)
        assert " ms" not in str(result), "the first wrong tries do not show the timings"
    assert checks.check_allreduce_prediction(...).status == checks.NOT_ATTEMPTED


# -- the hand-built DDP (11); its other answers are in tests/test_inside.py ------------
def test_check_hooks_names_handles_of_earlier_steps_kept_and_waited_for_again():
    """finish() waits and divides, but never empties what the hooks collected.

    The mistake is the kept handles, not waiting or dividing: the message
    must not tell the learner to do what the code already does.
    """
    path = ANSWERS / "inside_stale_handles.py"
    result = checks.check_hooks(path)
    assert result.status == checks.FAILED and result.stage == SYNCING, str(result)
    assert "in step 2, finish() waited again for" in result.happened, str(result)
    assert "earlier steps" in result.happened and "step 1 matched DDP's" in result.happened
    assert "wait for each all-reduce" not in str(result), str(result)
    finish = answers.line_of(path, "def finish(model, exchange):")
    assert result.fix.startswith(f"inside_stale_handles.py, line {finish} "), result.fix
    assert "clear()" not in str(result)
    assert "pending.clear()" in checks.check_hooks(path, reveal=True).fix


# -- the line that fixes a file is kept back on a first try -------------------------
@pytest.mark.parametrize(
    ("check", "answer", "hint", "line"),
    [
        ("check_launchers", "launchers_device_from_global_rank.py",
         "LOCAL_RANK (which GPU", 'device_for(int(os.environ["LOCAL_RANK"])'),
        ("check_seeds", "practice_seeds_shared_generator_class.py",
         "which every rank here seeds alike",
         "DataLoader(..., generator=torch.Generator().manual_seed(seed + rank))"),
        ("check_evaluate", "practice_evaluate_sampler_indices.py",
         "Every image must be in exactly one part",
         "Subset(test_dataset, range(rank, len(test_dataset), world_size))"),
        ("check_checkpoint", "checkpoint_no_barrier_buffered.py",
         "nothing made the other ranks wait", "barrier() after the save, outside the `if`"),
    ],
)  # fmt: skip
def test_file_checks_keep_the_fixing_line_back_until_asked(check, answer, hint, line):
    """First what happened and where to look; the line itself only with reveal=True.

    The answers are written in styles of their own; the third try without
    reveal is checked on a cheap check in tests/test_practice.py, and
    check_ddp_script's line in the set_epoch test above.
    """
    first = getattr(checks, check)(ANSWERS / answer)
    assert first.status == checks.FAILED and hint in first.fix, str(first)
    assert line not in str(first), str(first)
    assert f"{check}(..., reveal=True), or after 2 more tries" in first.fix, first.fix
    revealed = getattr(checks, check)(ANSWERS / answer, reveal=True)
    assert hint in revealed.fix and f"; the fix: {line}" in revealed.fix, str(revealed)


# -- an untouched exercise file is "not attempted" at once ---------------------------
#: Every check an exercise notebook calls on a file it writes: (notebook, file, check).
FILE_CHECKS = sorted(
    (notebook.name, target, check)
    for notebook in (ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")
    for cell in json.loads(notebook.read_text())["cells"]
    for check, target in re.findall(
        r"checks\.(check_\w+)\(\"workers/(\w+\.py)\"\)", "".join(cell["source"])
    )
)


def test_the_exercise_notebooks_check_files():
    assert len(FILE_CHECKS) >= 9, FILE_CHECKS


#: Exercise files with a stub inside code that is given (04's loop over epochs): they
#: could run something, so they are launched, and the raise is met in the ranks.
GIVEN_CODE_AROUND_A_STUB = {"exercise_04.py"}


@pytest.mark.parametrize(("notebook", "target", "check"), FILE_CHECKS)
def test_an_untouched_exercise_file_is_not_attempted_without_a_launch(
    notebook, target, check, tmp_path, monkeypatch
):
    calls = []
    real = base.launch_probe
    monkeypatch.setattr(base, "launch_probe", lambda *a: calls.append(a) or real(*a))
    result = getattr(checks, check)(stubbed(notebook, target, tmp_path))
    assert result.status == checks.NOT_ATTEMPTED, str(result)
    assert "replace the stub" in result.note, result.note
    assert bool(calls) == (target in GIVEN_CODE_AROUND_A_STUB), calls


def test_a_stub_with_a_line_written_is_launched_and_still_not_attempted(tmp_path, monkeypatch):
    # a learner's first line above the stub's raise: the file runs, and the raise
    # it still reaches says "not attempted" from inside the ranks
    path = stubbed("05_ddp_wrap.ipynb", "exercise_05.py", tmp_path)
    text = path.read_text()
    assert text.count("    # YOUR CODE HERE\n") == 1, text
    path.write_text(text.replace("    # YOUR CODE HERE\n", "    model = model.to(device)\n"))
    calls = []
    real = base.launch_probe
    monkeypatch.setattr(base, "launch_probe", lambda *a: calls.append(a) or real(*a))
    result = checks.check_wrap(path)
    assert calls and result.status == checks.NOT_ATTEMPTED, str(result)


def test_one_of_two_functions_written_is_launched(tmp_path, monkeypatch):
    stub = "def {}(rank):\n    'Doc.'\n    raise NotImplementedError('your code here')\n"
    written_one = stub.format("make_loader") + "def epoch_orders(rank):\n    return [rank]\n"
    assert base.untouched(
        stub.format("make_loader") + stub.format("epoch_orders"), "make_loader() and epoch_orders()"
    )
    assert not base.untouched(written_one, "make_loader() and epoch_orders()")
