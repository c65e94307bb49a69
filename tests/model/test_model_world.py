"""World model: causality, cached/expanded contexts, raw units, masks, parameter groups and preset sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from simdist.model import ImageConfig, WorldModel, load_model_config

OBS, A, C = 6, 3, 2


def _model(seed: int = 0, **changes) -> WorldModel:
    torch.manual_seed(seed)
    config = dataclasses.replace(load_model_config("tiny"), **changes)
    model = WorldModel(OBS, A, C, config)
    stats = {
        "proprio": {"mean": [0.5] * OBS, "std": [2.0] * OBS},
        "action": {"mean": [0.1] * A, "std": [0.3] * A},
        "command": {"mean": [1.0] * C, "std": [0.5] * C},
        "reward": {"mean": [-3.0], "std": [4.0]},
        "value": {"mean": [-50.0], "std": [20.0]},
    }
    model.normalizer.load_stats(stats)
    return model.eval()


def _inputs(model: WorldModel, b: int = 1, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    h = model.history
    return (
        torch.randn(b, h, OBS, generator=g),
        torch.randn(b, h, A, generator=g),
        torch.ones(b, h, dtype=torch.bool),
        torch.randn(b, OBS, generator=g),
    )


@torch.no_grad()
def test_predicted_latent_k_ignores_actions_after_k():
    model = _model()
    ctx = model.context(*_inputs(model))
    actions = torch.randn(1, model.horizon, A)
    base = model.predict(ctx, actions)
    for k in range(model.horizon - 1):
        changed = actions.clone()
        changed[:, k + 1 :] += torch.randn_like(changed[:, k + 1 :]) * 3
        out = model.predict(ctx, changed)
        torch.testing.assert_close(out[:, : k + 1], base[:, : k + 1], rtol=0, atol=1e-6)
        assert (out[:, k + 1 :] - base[:, k + 1 :]).abs().max() > 1e-4  # later latents do depend on them


@torch.no_grad()
def test_expanded_context_equals_a_context_computed_for_every_sample():
    model = _model()
    n = 5
    single = model.context(*_inputs(model))
    copies = model.context(*(x.expand(n, *x.shape[1:]) for x in _inputs(model)))
    actions, command = torch.randn(n, model.horizon, A), torch.randn(1, model.horizon, C)
    shared = single.expand(n)
    assert shared.batch_size == n and shared.dynamics_kv[0][0].shape[0] == 1  # K/V not copied
    latents = model.predict(shared, actions)
    torch.testing.assert_close(latents, model.predict(copies, actions), rtol=1e-5, atol=1e-5)
    r1, v1 = model.score(shared, latents, actions, command)
    r2, v2 = model.score(copies, latents, actions, command.expand(n, -1, -1))
    torch.testing.assert_close(r1, r2, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-4)
    assert r1.shape == v1.shape == (n, model.horizon)
    proposal = model.propose(shared, command)
    assert proposal.shape == (n, model.horizon, A)
    torch.testing.assert_close(proposal, model.propose(copies, command), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head_layers", [1, 3])
@torch.no_grad()
def test_last_value_only_equals_the_last_column_of_every_value(head_layers):
    model = _model(head_layers=head_layers)
    ctx = model.context(*_inputs(model)).expand(4)
    actions, command = torch.randn(4, model.horizon, A), torch.randn(1, model.horizon, C)
    latents = model.predict(ctx, actions)
    rewards, values = model.score(ctx, latents, actions, command)
    r_last, v_last = model.score(ctx, latents, actions, command, last_value_only=True)
    assert v_last.shape == (4, 1)
    torch.testing.assert_close(r_last, rewards, rtol=0, atol=0)
    torch.testing.assert_close(v_last[:, 0], values[:, -1], rtol=1e-5, atol=1e-5)
    # the shortcut really skips work: the value at the last step depends on every latent (bidirectional)
    changed = latents.clone()
    changed[:, 0] += 1.0
    _, v_changed = model.score(ctx, changed, actions, command, last_value_only=True)
    assert (v_changed - v_last).abs().min() > 1e-6


@torch.no_grad()
def test_inputs_and_outputs_are_raw_units():
    model = _model()
    plain = _model()
    plain.normalizer.load_stats(
        {
            f: {"mean": [0.0] * d, "std": [1.0] * d}
            for f, d in [("proprio", OBS), ("action", A), ("command", C), ("reward", 1), ("value", 1)]
        }
    )
    obs_hist, act_hist, mask, obs = _inputs(model)
    actions, command = torch.randn(2, model.horizon, A), torch.randn(2, model.horizon, C)
    ctx = model.context(obs_hist, act_hist, mask, obs)
    ctx_n = plain.context((obs_hist - 0.5) / 2, (act_hist - 0.1) / 0.3, mask, (obs - 0.5) / 2)
    latents = model.predict(ctx, actions)
    torch.testing.assert_close(latents, plain.predict(ctx_n, (actions - 0.1) / 0.3))
    r, v = model.score(ctx, latents, actions, command)
    r_n, v_n = plain.score(ctx_n, latents, (actions - 0.1) / 0.3, (command - 1.0) / 0.5)
    torch.testing.assert_close(r, r_n * 4.0 - 3.0)
    torch.testing.assert_close(v, v_n * 20.0 - 50.0)
    torch.testing.assert_close(
        model.propose(ctx, command), plain.propose(ctx_n, (command - 1.0) / 0.5) * 0.3 + 0.1
    )


@torch.no_grad()
def test_padded_history_is_ignored():
    model = _model()
    obs_hist, act_hist, mask, obs = _inputs(model)
    mask[:, :2] = False
    actions = torch.randn(1, model.horizon, A)
    base = model.predict(model.context(obs_hist, act_hist, mask, obs), actions)
    obs_hist[:, :2] += 10
    act_hist[:, :2] -= 10
    torch.testing.assert_close(model.predict(model.context(obs_hist, act_hist, mask, obs), actions), base)
    mask[:, :2] = True  # once real, the same values matter
    assert (model.predict(model.context(obs_hist, act_hist, mask, obs), actions) - base).abs().max() > 1e-4


def test_image_branch_fuses_into_the_same_latent():
    model = _model(image=ImageConfig(channels=(4, 8), size=64))
    obs_hist, act_hist, mask, obs = _inputs(model, b=2)
    image = torch.randint(0, 255, (2, 64, 64, 3), dtype=torch.uint8)
    ctx = model.context(obs_hist, act_hist, mask, obs, image)
    assert ctx.latent.shape == (2, model.latent_dim)
    other = model.context(obs_hist, act_hist, mask, obs, 255 - image)
    assert (ctx.latent - other.latent).abs().max() > 1e-5
    with pytest.raises(ValueError, match="image"):
        model.context(obs_hist, act_hist, mask, obs)


@pytest.mark.parametrize("dims", [(35, 12, 3), (31, 4, 4)], ids=["go2", "ur5e"])
def test_preset_sizes(dims):
    counts = {}
    for preset in ("tiny", "default", "gpu"):
        model = WorldModel(*dims, load_model_config(preset))
        total = sum(p.numel() for p in model.parameters())
        dynamics = sum(p.numel() for p in model.dynamics.parameters())
        counts[preset] = total
        print(f"{preset} {dims}: {total} parameters, dynamics {dynamics} ({dynamics / total:.0%})")
    assert counts["tiny"] < counts["default"] < counts["gpu"]
    assert 0.5e6 < counts["gpu"] < 0.7e6  # paper: 667 761 for the Go2
