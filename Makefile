# SimDist: `make setup` once, then `make test`; `make run` is the README's main job.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export MUJOCO_GL ?= egl

.PHONY: setup test lint run clean

$(BIN)/simdist: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the local CPU wheel, never a CUDA download.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(BIN)/simdist

test: setup
	$(BIN)/python -m pytest tests

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

run: setup
	$(BIN)/simdist adapt --task go2_slope --profile ptfe --rounds 2 --minutes 5

clean:
	rm -rf $(VENV) .pytest_cache
