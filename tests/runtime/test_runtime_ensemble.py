"""`simdist ensemble`: a new model whose fresh members learn from simulation runs while member 0, the encoder
and every head stay bit-identical, and the source model is untouched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from simdist.errors import CheckpointError, ConfigError
from simdist.model.checkpoint import current_version, load_checkpoint, pretrained_version
from simdist.runtime.ensemble import build_ensemble
from simdist.runtime.finetune import finetune
from simdist.runtime.finetune_options import FinetuneOptions
from simdist.runtime.store import ModelStore


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
    # v0000, the ensemble's starting version, is the source's dynamics in every member (safe to roll back to);
    # the trained members did not start from member 0's weights but from a fresh initialisation
    members = load_checkpoint(out, version=0).dynamics
    zero = members.member_state()
    for i in range(2):
        assert all(torch.equal(zero[k], start[f"dynamics.extra.{i}.{k}"]) for k in zero)
    decoder_weights = [k for k in zero if k.startswith("decoder.") and k.endswith("weight")]
    moved = [
        (end[f"dynamics.extra.0.{k}"] - zero[k]).norm() / zero[k].norm()
        for k in decoder_weights
        if zero[k].norm() > 0
    ]
    assert float(torch.stack(moved).median()) > 0.5  # 60 steps at lr 1e-3 from member 0 would stay close
    # the trained members are the ensemble's pretraining: real-data adaptation starts from v0001, and only a
    # version after it grants the planner its adapted search
    assert pretrained_version(out) == 1 and pretrained_version(go2_model) == 0
    store = ModelStore(out)
    assert store.version == 1 and not store.adapted
    bags = sorted((out / "sim_bags").glob("run_*"))
    frozen = dataclasses.replace(
        options, trainable="dynamics", lr=0.0, min_improvement=-1.0, start_from="pretrained"
    )
    again = finetune(out, bags, frozen)  # the gate lets anything through: v0002, trained afresh from v0001
    assert again.published and again.version == 2 and again.latent_after == pytest.approx(again.latent_before)
    assert ModelStore(out).adapted


def test_an_ensembles_first_version_predicts_as_its_source(go2_model: Path, tmp_path: Path) -> None:
    from simdist.model.checkpoint import with_dynamics_members
    from simdist.model.dynamics import disagreement

    out = with_dynamics_members(go2_model, tmp_path / "ens", 4, seed=3)
    single, ensemble = load_checkpoint(go2_model), load_checkpoint(out, version=0)
    torch.manual_seed(0)
    latent = torch.randn(6, single.latent_dim)
    actions = torch.randn(6, single.horizon, single.act_dim)
    kv_single = single.dynamics.cross_kv(latent.unsqueeze(1))
    kv_ensemble = ensemble.dynamics.cross_kv(latent.unsqueeze(1))
    with torch.no_grad():
        expected = single.dynamics(latent, actions, kv_single, None)
        members = ensemble.dynamics.member_predictions(latent, actions, kv_ensemble, None)
    assert members.shape[0] == 4
    assert torch.allclose(members.mean(0), expected, atol=1e-6)
    assert float(disagreement(members).abs().max()) < 1e-10
    # from dynamics that learnt from real data, no ensemble: its v0000 would pass for pretrained
    from simdist.model.checkpoint import publish_dynamics

    publish_dynamics(go2_model, single, note="from the robot")
    with pytest.raises(CheckpointError, match="learnt from real data"):
        with_dynamics_members(go2_model, tmp_path / "from_adapted", 2)


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
