# SimDist: `make setup` once, then `make test`; `make run` is the README's main job.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export MUJOCO_GL ?= egl

.PHONY: setup test lint run clean models

$(BIN)/simdist: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the local CPU wheel, never a CUDA download.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,hardware,ros]'
	# the Go2 SDK without its opencv-python requirement (it would replace opencv-python-headless's cv2)
	$(BIN)/pip install -q --no-deps unitree-sdk2py-dimos==1.0.3
	@echo "(pip will note that unitree-sdk2py-dimos wants opencv-python: intended, opencv-python-headless provides cv2)"
	bash -c "set -o pipefail; $(BIN)/pip install -q cyclonedds==11.0.1 2>&1 | sed 's/^ERROR: /note: /'"
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

# The shipped models: expert, corpus and world model per task with the default presets (hours on 2 cores),
# then only the checkpoint files are copied under models/<task>/. The peg pretrains 2.5x longer (15 000 steps,
# about 55 minutes here): its policy head gained +0.12 success on `sim`, 4.0 SE over 200 paired episodes, one
# pretraining run each (docs/results.md, "Shipping the peg's 15 000-step model", and the run-to-run spread after it).
TASKS ?= go2_slope go2_foam ur5e_peg
models: setup
	for task in $(TASKS); do \
	  case $$task in ur5e_peg) longer="--set train.steps=15000";; *) longer="";; esac; \
	  $(BIN)/simdist expert train --task $$task --preset default && \
	  $(BIN)/simdist data generate --task $$task --preset default --out runs/data/$$task && \
	  $(BIN)/simdist train pretrain --task $$task --data runs/data/$$task --preset default $$longer --out runs/models/$$task --no-progress && \
	  rm -rf models/$$task && mkdir -p models/$$task && \
	  cp -r runs/models/$$task/world_model.yaml runs/models/$$task/weights.safetensors runs/models/$$task/dynamics models/$$task/ \
	  || exit 1; \
	done
