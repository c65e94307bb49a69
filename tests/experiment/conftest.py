"""Fixtures for the experiment tests: an untrained Go2 expert, a tiny pretrained world model, one tiny run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from experiment_setup import OVERRIDES, PROFILE, TASK

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def expert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from simdist.experts.config import load_expert_config
    from simdist.experts.train import untrained_expert
    from simdist.sim.config import load_task

    return untrained_expert(
        load_task(TASK, OVERRIDES), load_expert_config("tiny"), tmp_path_factory.mktemp("expert") / "go2"
    )


@pytest.fixture(scope="session")
def base_model(tmp_path_factory: pytest.TempPathFactory, expert_dir: Path) -> Path:
    """Pretrained through the same pipeline (and presets) as the oracle, without the widened randomisation."""
    from simdist.experiment.oracle import pretrain_pipeline

    return pretrain_pipeline(
        TASK,
        expert_dir,
        tmp_path_factory.mktemp("base"),
        data_preset="tiny",
        train_preset="tiny",
        overrides=OVERRIDES,
        data_overrides={"steps": 600, "steps_per_shard": 600},
    )


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, expert_dir: Path, base_model: Path):  # type: ignore[no-untyped-def]
    """One run of every method for one point (0.1 min) on the tiny preset; (result, run folder)."""
    from simdist.experiment import run_experiment

    out = tmp_path_factory.mktemp("experiment") / "run"
    result = run_experiment(
        TASK, PROFILE, model=base_model, expert=expert_dir, out=out, preset="tiny", overrides=OVERRIDES
    )
    return result, out
