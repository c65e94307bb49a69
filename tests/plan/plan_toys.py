"""Analytic world models implementing the planner's Protocol, for tests with known optima."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class PointContext:
    start: Tensor  # (n, A) position at the current step

    def expand(self, n: int) -> PointContext:
        return PointContext(self.start[:1].expand(n, -1))


class PointMass:
    """x_{k+1} = x_k + dt a_k; reward -|x_{k+1} - goal|^2 - effort |a_k|^2; value -terminal |x_{k+1} - goal|^2.

    The observation is the position; the latent is the predicted position; the command is the goal.
    """

    def __init__(
        self, horizon: int = 6, dim: int = 2, dt: float = 1.0, effort: float = 0.5, terminal: float = 1.0
    ):
        self.horizon, self.act_dim, self.cmd_dim = horizon, dim, dim
        self.dt, self.effort, self.terminal = dt, effort, terminal
        self.policy = torch.zeros(1, horizon, dim)
        self.predict_calls: list[Tensor] = []

    def context(self, obs_hist: Tensor, act_hist: Tensor, hist_mask: Tensor, obs: Tensor) -> PointContext:
        return PointContext(obs.reshape(1, self.act_dim).float())

    def predict(self, ctx: PointContext, actions: Tensor) -> Tensor:
        self.predict_calls.append(actions.clone())
        return ctx.start[:, None, :] + self.dt * actions.cumsum(dim=1)

    def score(
        self,
        ctx: PointContext,
        latents: Tensor,
        actions: Tensor,
        command: Tensor,
        last_value_only: bool = False,
    ) -> tuple[Tensor, Tensor]:
        miss = (latents - command).square().sum(-1)
        return -miss - self.effort * actions.square().sum(-1), -self.terminal * miss

    def propose(self, ctx: PointContext, command: Tensor) -> Tensor:
        return self.policy.clone()

    def returns(self, start: Tensor, goal: Tensor, actions: Tensor, gamma: float) -> Tensor:
        """The true discounted return of action chunks (N,T,A), with the gamma^T terminal value."""
        ctx = PointContext(start.reshape(1, -1).expand(actions.shape[0], -1))
        latents = ctx.start[:, None, :] + self.dt * actions.cumsum(dim=1)
        rewards, values = self.score(ctx, latents, actions, goal.reshape(1, 1, -1))
        discounts = gamma ** torch.arange(self.horizon, dtype=torch.float32)
        return rewards @ discounts + gamma**self.horizon * values[:, -1]

    def optimum(self, start: Tensor, goal: Tensor, gamma: float) -> Tensor:
        """The maximiser (T,A) of `returns`: a weighted ridge regression, solved per dimension."""
        horizon = self.horizon
        lower = torch.tril(torch.ones(horizon, horizon, dtype=torch.float64)) * self.dt
        discounts = gamma ** torch.arange(horizon, dtype=torch.float64)
        weights = torch.diag(discounts)
        weights[-1, -1] += gamma**horizon * self.terminal
        lhs = lower.T @ weights @ lower + self.effort * torch.diag(discounts)
        rhs = lower.T @ weights @ (goal - start).double().reshape(1, -1).expand(horizon, -1)
        return torch.linalg.solve(lhs, rhs).float()


def planner_config(**changes: object):
    """A thorough MPPI config for the toys (many samples and iterations), with `changes` applied."""
    from simdist.plan import PlannerConfig

    base = PlannerConfig(
        num_samples=256,
        num_policy_samples=8,
        policy_std=0.05,
        iterations=12,
        elites=32,
        temperature=0.25,
        init_std=2.0,
        min_std=0.01,
        horizon=4,
        discount=0.99,
        keep_elites=True,
    )
    return dataclasses.replace(base, **changes)
