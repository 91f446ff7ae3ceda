# One entry point for learners and maintainers. Both main targets create or
# update the project's own virtual environment in .venv first.
#
# .venv is installed in two layers, each with its own stamp: what a learner
# needs (make lab), then the test tools on top (make test). So `make lab`
# after `make test` installs nothing, and `make test` after `make lab` adds
# only the test tools. Both layers follow constraints.txt, the versions the
# notebooks' compared outputs were made with.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check
CONSTRAINTS := constraints.txt
LAB_STAMP   := $(VENV)/.installed-lab
TEST_STAMP  := $(VENV)/.installed-test
# torch's build: auto (the CPU build on a machine without nvidia-smi, where
# pip would otherwise fetch the CUDA build), cpu, or default (what pip's own
# configuration offers). See README "How torch is installed".
TORCH ?= auto
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# JupyterLab refuses to start as root (containers, some cloud machines) unless told.
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

# make test runs the tests on TEST_WORKERS pytest-xdist workers, one file at a
# time per worker (a notebook's cells share one kernel). Most of a test is
# processes starting and waiting for each other, so one worker more than the
# machine has cores keeps every core busy (measured: README "Running the
# tests"). TEST_WORKERS=0 runs everything in one process, in order.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min(6, (os.cpu_count() or 1) + 1))')
PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

.PHONY: lab test install install-test lint exercises notebooks colab-cells course-map gpu-check soak durations bench clean

lab: $(LAB_STAMP)  ## open the course in JupyterLab (listens on 127.0.0.1 only)
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=. $(LAB_ROOT) $(LAB_ARGS) \
	  notebooks/00_setup.ipynb

test: $(TEST_STAMP) lint  ## unit tests, doctests, every notebook under nbval, exercises in sync
	$(BIN)/python -m ddp_lesson.exercises --check
	$(BIN)/python -m pytest $(PARALLEL)

lint: $(TEST_STAMP)
	$(BIN)/ruff check conftest.py ddp_lesson tests notebooks solutions bench tools scripts

exercises: $(LAB_STAMP)  ## regenerate exercises/ from solutions/ (never overwrites a learner's edits)
	$(BIN)/python -m ddp_lesson.exercises

install: $(LAB_STAMP)  ## the learner's packages only (what make lab uses)

install-test: $(TEST_STAMP)  ## the learner's packages plus the test tools

soak: $(TEST_STAMP)  ## 200 launches of the lesson's training worker in a row; all must tear down cleanly
	DDP_LESSON_TEARDOWN_RUNS=200 $(BIN)/python -m pytest -o addopts="-p no:cacheprovider" \
	  tests/test_teardown.py -v -s

durations: $(TEST_STAMP)  ## rewrite tests/durations.txt, the order make test's workers take the files in
	$(BIN)/python -m pytest $(PARALLEL) --write-durations tests/durations.txt

bench: $(LAB_STAMP)  ## DDP speed on this machine: a table per measurement and bench/results/bench.png
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# The vector instructions the saved outputs are made with, at most (as conftest.py sets
# for the compared runs): AVX-512 kernels round some last printed digits differently.
SAME_DIGITS := ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2

notebooks: $(LAB_STAMP)  ## re-run the lessons and save their outputs (what nbval compares)
	for dir in notebooks solutions; do (cd $$dir && $(SAME_DIGITS) ../$(BIN)/jupyter nbconvert --to notebook \
	  --execute --inplace --ExecutePreprocessor.record_timing=False [0-9][0-9]_*.ipynb) || exit 1; done

colab-cells:  ## put the current Colab badge and set-up cell at the top of every lesson notebook
	$(PYTHON) tools/colab_cells.py

course-map:  ## rewrite the course map (README, 00) and each lesson's time line and "Where next" cell
	$(PYTHON) tools/course_map.py

gpu-check: $(TEST_STAMP)  ## run every lesson and solution notebook here, compare with the committed outputs
	$(BIN)/python tools/gpu_check.py $(GPU_CHECK_ARGS)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' || \
	  { echo "ddp-lesson needs Python 3.11, 3.12 or 3.13 (README: 'Where the course runs');" \
	    "$(PYTHON) is $$($(PYTHON) -V 2>&1). Run: make PYTHON=python3.11 $(MAKECMDGOALS)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(LAB_STAMP): pyproject.toml $(CONSTRAINTS) tools/install_torch.py | $(BIN)/python
	$(BIN)/python tools/install_torch.py --build $(TORCH) --cpu-index $(TORCH_CPU_INDEX) \
	  --constraints $(CONSTRAINTS)
	@echo "[course] installing the course and its packages (JupyterLab, scikit-learn, ...)"
	$(PIP) install --constraint $(CONSTRAINTS) -e .
	@touch $@

# Only the test extra's packages: the course itself is installed already.
$(TEST_STAMP): $(LAB_STAMP)
	@echo "[course] adding the test tools (pytest, nbval, ruff, playwright, ...)"
	$(BIN)/python tools/course_meta.py extra test > $(VENV)/test-requirements.txt
	$(PIP) install --constraint $(CONSTRAINTS) -r $(VENV)/test-requirements.txt
	@touch $@

clean:  ## remove the virtual environment, generated worker files and checkpoints
	rm -rf $(VENV)
	find notebooks solutions exercises -path '*/workers/*' ! -name __init__.py -delete
	rm -rf notebooks/checkpoints build/gpu-check
