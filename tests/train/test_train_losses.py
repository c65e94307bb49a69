"""Loss terms, masks and schedule; overfitting one small fixed batch drives every term near zero."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from simdist.data import InMemoryEpisodes, WindowSampler
from simdist.data.synthetic import linear_system_episodes
from simdist.model import WorldModel, load_model_config
from simdist.train.config import LossWeights
from simdist.train.losses import compute_losses, loss_masks
from simdist.train.schedule import learning_rate


def test_behaviour_cloning_mask_stops_at_first_non_expert_step():
    flags = torch.tensor([[True, True, False, True], [True, True, True, True]])
    future = torch.tensor([[True, True, True, True], [True, True, True, False]])
    exists = torch.ones_like(future)  # every step of the chunk exists; the last one's successor may not
    batch = type("B", (), {"expert_flag": flags & exists, "future_mask": future, "step_mask": exists})()
    masks = loss_masks(batch)
    # an action needs its step only: the second window's last step (an episode's last) is cloned too
    assert masks["action"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert masks["dynamics"].tolist() == future.float().tolist()
    assert masks["reward"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]  # an episode's last step earns its reward


def test_behaviour_cloning_with_labels_counts_the_step_the_expert_reached():
    flags = torch.tensor([[True, True, False, True], [False, True, True, True]])
    future = torch.tensor([[True, True, True, True], [True, True, True, False]])
    labels = torch.zeros(2, 4, 3)
    batch = type(
        "B",
        (),
        {"expert_flag": flags & future, "future_mask": future, "step_mask": future, "expert_action": labels},
    )()
    # step k counts while steps 0..k-1 were the expert's own: the label at a noised step still does
    assert loss_masks(batch)["action"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]


def test_labels_are_the_behaviour_cloning_target_and_cloned_where_noise_acted():
    """On a corpus whose noised steps carry the expert's answer, cloning the labels learns that answer there;
    cloning the executed actions (masked to clean chunks) leaves the noised windows unlearned, or learns the noise."""
    torch.manual_seed(0)
    episodes = [e for e, _ in linear_system_episodes(6, length=30, seed=3, expert_labels=True)]
    source = InMemoryEpisodes(episodes)
    config = dataclasses.replace(load_model_config("tiny"), latent_dim=32, encoder_hidden=(64,))
    model = WorldModel(6, 2, 2, config)
    model.normalizer.load_stats(source.normalizer_stats())
    sampler = WindowSampler(source, config.history, config.horizon, expert_labels=True)
    batch = sampler.sample(64, np.random.default_rng(0))
    out = model(batch)
    np.testing.assert_allclose(
        out["action_target"].detach(), model.normalizer.normalize("action", batch.expert_action).detach()
    )
    noised = ~batch.expert_flag[:, 0]  # windows whose first step was noised: the labels' new cases
    assert noised.sum() >= 5 and not torch.allclose(batch.actions[noised, 0], batch.expert_action[noised, 0])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    weights = LossWeights(dynamics=0.0, reward=0.0, value=0.0, action=1.0)
    for _ in range(300):
        total, _ = compute_losses(model(batch), batch, weights)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    with torch.no_grad():
        first = model.normalizer.denormalize("action", model(batch)["action"])[:, 0]
    to_label = (first[noised] - batch.expert_action[noised, 0]).abs().mean()
    to_executed = (first[noised] - batch.actions[noised, 0]).abs().mean()
    assert to_label < 0.1 * to_executed, (float(to_label), float(to_executed))


def test_schedule_warms_up_then_decays_to_final():
    kw = {"peak": 2e-4, "final": 1e-4, "warmup": 10, "total": 110}
    assert math.isclose(learning_rate(0, **kw), 2e-5)
    assert math.isclose(learning_rate(9, **kw), 2e-4)
    assert math.isclose(learning_rate(60, **kw), 1.5e-4)
    assert math.isclose(learning_rate(110, **kw), 1e-4) and math.isclose(learning_rate(500, **kw), 1e-4)


def test_overfitting_a_fixed_batch_drives_every_loss_near_zero():
    torch.manual_seed(0)
    episodes = [e for e, _ in linear_system_episodes(4, length=30, seed=2)]
    for e in episodes:  # expert chunks everywhere so behaviour cloning sees every step
        e["expert_flag"][:] = True
    source = InMemoryEpisodes(episodes)
    config = dataclasses.replace(load_model_config("tiny"), latent_dim=32, encoder_hidden=(64,))
    model = WorldModel(6, 2, 2, config)
    model.normalizer.load_stats(source.normalizer_stats())
    batch = WindowSampler(source, config.history, config.horizon).sample(16, np.random.default_rng(0))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(400):
        total, terms = compute_losses(model(batch), batch, LossWeights())
        first = first or {k: float(v) for k, v in terms.items()}
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    last = {k: float(v) for k, v in terms.items()}
    for k in ("reward", "value", "action"):
        assert last[k] < 0.02, (k, first[k], last[k])
    # the dynamics error is small relative to the spread of the latents (a collapsed encoder would not count)
    with torch.no_grad():
        z = model.encoder(model.normalizer.normalize("obs", batch.future_obs))
    spread = float(z.var(dim=(0, 1)).mean())
    assert spread > 1e-2 and last["dynamics"] < 0.05 * spread, (first, last, spread)


def test_the_heads_never_attend_to_the_padding_past_an_episodes_end():
    """Training windows pad past an episode's end (zero actions, latents predicted from them); a planned chunk
    never has padding. The reward at every step that exists and the value at every step t+k+1 that exists must
    not depend on what the padding holds, or the heads learn "the episode ends here" (a fall's penalty) from it."""
    torch.manual_seed(0)
    episodes = [e for e, _ in linear_system_episodes(8, length=(3, 8), seed=4)]
    source = InMemoryEpisodes(episodes)
    config = dataclasses.replace(load_model_config("tiny"), latent_dim=32, encoder_hidden=(64,))
    model = WorldModel(6, 2, 2, config).eval()
    model.normalizer.load_stats(source.normalizer_stats())
    batch = WindowSampler(source, config.history, config.horizon).sample(32, np.random.default_rng(0))
    padded = ~batch.step_mask
    assert padded.any(dim=1).sum() >= 10  # many windows run past their episode's end
    with torch.no_grad():
        base = model(batch)
        changed = dataclasses.replace(
            batch,
            actions=torch.where(padded[..., None], torch.full_like(batch.actions, 3.0), batch.actions),
            command=torch.where(padded[..., None], -batch.command, batch.command),
        )
        out = model(changed)
    steps, futures = batch.step_mask, batch.future_mask
    torch.testing.assert_close(out["reward"][steps], base["reward"][steps])
    torch.testing.assert_close(out["value"][futures], base["value"][futures])
    # the padding did change what the heads output there (the check above is not vacuous)
    assert (out["reward"][padded] - base["reward"][padded]).abs().max() > 1e-3
