"""Dynamics ensembles: identical members never disagree, trained members disagree more off their data, and the
planner's disagreement penalty keeps it away from what the members disagree on."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from simdist.model import WorldModel, load_model_config
from simdist.model.dynamics import Dynamics, disagreement

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plan"))
from plan_toys import PointContext, PointMass, planner_config  # noqa: E402

OBS, A, C = 6, 3, 2


def _model(members: int, seed: int = 0) -> WorldModel:
    torch.manual_seed(seed)
    config = dataclasses.replace(load_model_config("tiny"), dynamics_members=members)
    return WorldModel(OBS, A, C, config).eval()


def _context(model: WorldModel):
    g = torch.Generator().manual_seed(1)
    h = model.history
    return model.context(
        torch.randn(1, h, OBS, generator=g),
        torch.randn(1, h, A, generator=g),
        torch.ones(1, h, dtype=torch.bool),
        torch.randn(1, OBS, generator=g),
    )


def test_identical_members_have_zero_disagreement_and_their_mean_is_member_zero() -> None:
    model = _model(members=3)
    for member in model.dynamics.extra:
        member.load_state_dict(
            {k: v for k, v in model.dynamics.state_dict().items() if not k.startswith("extra.")}
        )
    ctx = _context(model)
    actions = torch.randn(5, model.horizon, A)
    with torch.no_grad():
        mean, spread = model.predict_with_disagreement(ctx.expand(5), actions)
        single = _model(members=1)
        single.load_state_dict(
            {k: v for k, v in model.state_dict().items() if not k.startswith("dynamics.extra.")}
        )
        alone = single.predict(_context(single).expand(5), actions)
    assert spread.shape == (5, model.horizon) and torch.equal(spread, torch.zeros_like(spread))
    torch.testing.assert_close(mean, alone)


def test_members_trained_on_the_same_data_disagree_more_off_it() -> None:
    """Toy: z(t+k) = z_t + 0.1 * sum of the actions so far, learned from actions in [-1, 1]; tested at 6x that."""
    torch.manual_seed(0)
    dim, horizon = 8, 4
    dynamics = Dynamics(2, dim, horizon, layers=1, heads=2, mlp_ratio=2, members=4)
    tokens = torch.randn(1, 3, dim)
    readout = torch.randn(2, dim) * 0.5

    def batch(n: int, scale: float):
        latent = torch.randn(n, dim)
        actions = (torch.rand(n, horizon, 2) * 2 - 1) * scale
        target = latent[:, None] + 0.1 * actions.cumsum(1) @ readout
        return latent, actions, target

    optim = torch.optim.Adam(dynamics.parameters(), lr=3e-3)
    for _ in range(400):
        latent, actions, target = batch(64, 1.0)
        kv = dynamics.cross_kv(tokens.expand(64, -1, -1))
        loss = (dynamics.member_predictions(latent, actions, kv, None) - target).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
    with torch.no_grad():
        spread = {}
        for scale in (1.0, 6.0):
            latent, actions, target = batch(256, scale)
            kv = dynamics.cross_kv(tokens.expand(256, -1, -1))
            spread[scale] = float(disagreement(dynamics.member_predictions(latent, actions, kv, None)).mean())
    assert loss < 0.01  # the members learned the data
    assert spread[6.0] > 3 * spread[1.0] > 0


class Unsure(PointMass):
    """The point mass, with an ensemble that disagrees wherever the predicted position's first coordinate is > 0.5."""

    def predict_with_disagreement(self, ctx: PointContext, actions: torch.Tensor):
        latents = self.predict(ctx, actions)
        return latents, 50.0 * (latents[..., 0] - 0.5).clamp_min(0.0)


def test_the_planner_stays_away_from_what_the_ensemble_disagrees_on() -> None:
    from simdist.plan import Planner

    goal = torch.tensor([2.0, 0.0])
    config = planner_config(num_policy_samples=0, iterations=8)
    finals = {}
    for weight in (0.0, 1.0):
        model = Unsure(horizon=4, effort=0.1)
        planner = Planner(model, dataclasses.replace(config, disagreement_weight=weight), seed=0)
        ctx = model.context(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 3), torch.zeros(1, 2))
        plan = planner.act(ctx, goal)
        finals[weight] = float(plan.actions.sum(0)[0])  # where the plan ends, along the first coordinate
    assert finals[0.0] > 1.5  # without the penalty it heads for the goal at 2.0
    assert finals[1.0] < 0.8  # with it, it stops near the edge of what the members agree on (0.5)
