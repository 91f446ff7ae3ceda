# One entry point for learners and maintainers. Both main targets create or
# update the project's own virtual environment in .venv first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# JupyterLab refuses to start as root (containers, some cloud machines) unless told.
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test install lint exercises notebooks soak bench clean

lab: $(STAMP)  ## open the course in JupyterLab (listens on 127.0.0.1 only)
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=. $(LAB_ROOT) $(LAB_ARGS) \
	  notebooks/00_setup.ipynb

test: $(STAMP) lint  ## unit tests, doctests, every notebook under nbval, exercises in sync
	$(BIN)/python -m ddp_lesson.exercises --check
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --nbval-lax exercises

lint: $(STAMP)
	$(BIN)/ruff check ddp_lesson tests notebooks solutions bench

exercises: $(STAMP)  ## regenerate exercises/ from solutions/ (never overwrites a learner's edits)
	$(BIN)/python -m ddp_lesson.exercises

install: $(STAMP)

soak: $(STAMP)  ## 200 launches of the lesson's training worker in a row; all must tear down cleanly
	DDP_LESSON_TEARDOWN_RUNS=200 $(BIN)/python -m pytest -o addopts="-p no:cacheprovider" \
	  tests/test_teardown.py -v -s

bench: $(STAMP)  ## DDP speed on this machine: a table per measurement and bench/results/bench.png
	$(BIN)/python bench/run.py $(BENCH_ARGS)

notebooks: $(STAMP)  ## re-run the lessons and save their outputs (what nbval compares)
	for dir in notebooks solutions; do (cd $$dir && ../$(BIN)/jupyter nbconvert --to notebook \
	  --execute --inplace --ExecutePreprocessor.record_timing=False [0-9][0-9]_*.ipynb) || exit 1; done

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
	  { echo "ddp-lesson needs Python 3.10 or newer; run: make PYTHON=python3.11 ..."; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

clean:  ## remove the virtual environment, generated worker files and checkpoints
	rm -rf $(VENV)
	find notebooks solutions exercises -path '*/workers/*' ! -name __init__.py -delete
	rm -rf notebooks/checkpoints
