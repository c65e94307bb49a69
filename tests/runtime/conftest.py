"""Fixtures for the runtime tests: randomly initialised tiny checkpoints (copied per test) and a fast planner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from simdist.runtime.scratch import write_random_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def _templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "go2_slope": write_random_checkpoint(root / "go2_slope", "go2_slope"),
        "ur5e_peg": write_random_checkpoint(root / "ur5e_peg", "ur5e_peg"),
    }


@pytest.fixture
def go2_model(tmp_path: Path, _templates: dict[str, Path]) -> Path:
    return Path(shutil.copytree(_templates["go2_slope"], tmp_path / "model"))


@pytest.fixture
def ur5e_model(tmp_path: Path, _templates: dict[str, Path]) -> Path:
    return Path(shutil.copytree(_templates["ur5e_peg"], tmp_path / "model_ur5e"))
