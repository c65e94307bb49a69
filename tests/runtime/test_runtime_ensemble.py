"""`simdist ensemble`: a new model whose fresh members learn from simulation runs while member 0, the encoder
and every head stay bit-identical, and the source model is untouched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from simdist.errors import CheckpointError, ConfigError
from simdist.model.checkpoint import current_version, load_checkpoint
from simdist.runtime.ensemble import build_ensemble
from simdist.runtime.finetune_options import FinetuneOptions


def test_fresh_members_train_on_sim_runs_and_member_zero_stays(go2_model: Path, tmp_path: Path) -> None:
    options = FinetuneOptions(
        lr=1e-3, max_steps=60, eval_every=20, warmup_steps=5, val_fraction=0.2, trainable="new_members"
    )
    out = build_ensemble(
        "go2_slope",
        go2_model,
        tmp_path / "ens",
        3,
        sim_minutes=0.1,
        options=options,
        overrides={"episode_seconds": 1.0},
        log=lambda _: None,
    )
    source = load_checkpoint(go2_model).state_dict()
    start, end = load_checkpoint(out, version=0).state_dict(), load_checkpoint(out).state_dict()
    assert current_version(out) == 1 and current_version(go2_model) == 0
    assert all(torch.equal(source[k], end[k]) for k in source)  # member 0 and every shared weight
    changed = {k for k in end if not torch.equal(start[k], end[k])}
    assert changed and all(k.startswith("dynamics.extra.") for k in changed)
    assert any(k.startswith("dynamics.extra.0.") for k in changed)
    assert any(k.startswith("dynamics.extra.1.") for k in changed)
    assert list((out / "sim_bags").glob("run_*"))


def test_refusals(go2_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 2"):
        build_ensemble("go2_slope", go2_model, tmp_path / "one", 1, log=lambda _: None)
    (tmp_path / "taken").mkdir()
    with pytest.raises(CheckpointError, match="already exists"):
        build_ensemble("go2_slope", go2_model, tmp_path / "taken", 3, log=lambda _: None)
    from simdist.runtime.deploy import run_deploy
    from simdist.runtime.finetune import finetune

    bag = run_deploy("go2_slope", "sim:sim", go2_model, ticks=150, bag_dir=tmp_path / "bags").bag
    options = dataclasses.replace(FinetuneOptions(), trainable="new_members")
    with pytest.raises(ConfigError, match="more than one dynamics member"):
        finetune(go2_model, [bag], options)
    assert current_version(go2_model) == 0
