"""Reward and value heads: bidirectional transformer layers over a predicted latent trajectory."""

from __future__ import annotations

import torch
from torch import nn

from simdist.model.layers import EncoderBlock


class SequenceHead(nn.Module):
    """Per-step scalar from a sequence of latents plus optional action and command tokens summed per step."""

    def __init__(
        self,
        latent_dim: int,
        cmd_dim: int,
        act_dim: int | None,
        horizon: int,
        layers: int,
        heads: int,
        mlp_ratio: int,
    ) -> None:
        super().__init__()
        self.latent = nn.Linear(latent_dim, latent_dim)
        self.command = nn.Linear(cmd_dim, latent_dim)
        self.action = nn.Linear(act_dim, latent_dim) if act_dim is not None else None
        self.position = nn.Parameter(torch.randn(horizon, latent_dim) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(latent_dim, heads, mlp_ratio) for _ in range(layers))
        self.norm = nn.LayerNorm(latent_dim)
        self.out = nn.Linear(latent_dim, 1)

    def forward(
        self,
        latents: torch.Tensor,
        command: torch.Tensor,
        actions: torch.Tensor | None = None,
        *,
        last_only: bool = False,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(N, T) per-step outputs, or with `last_only` the last step's alone (N, 1): the same numbers, with the
        last block computing one query instead of T.

        `key_mask` (N, T): the steps that exist (training windows pad past an episode's end). Without it every
        step attends to the padding after an episode's last step, which no planned chunk has: the head could read
        "the episode ends here" from the padding instead of from the state (a fall's penalty at the last step)."""
        if key_mask is not None and bool(key_mask.all()):
            key_mask = None  # nothing padded: the planner's path, bit-identical
        x = self.latent(latents) + self.command(command) + self.position[: latents.shape[1]]
        if self.action is not None:
            if actions is None:
                raise ValueError("this head needs actions")
            x = x + self.action(actions)
        for i, block in enumerate(self.blocks):
            x = block(x, last_only=last_only and i == len(self.blocks) - 1, key_mask=key_mask)
        return self.out(self.norm(x)).squeeze(-1)


class RewardHead(SequenceHead):
    """r_hat(t+k) from [z_t, z_hat(t+1..t+T-1)], actions t..t+T-1 and commands."""

    def __init__(
        self,
        latent_dim: int,
        cmd_dim: int,
        act_dim: int,
        horizon: int,
        layers: int,
        heads: int,
        mlp_ratio: int,
    ):
        super().__init__(latent_dim, cmd_dim, act_dim, horizon, layers, heads, mlp_ratio)


class ValueHead(SequenceHead):
    """V_hat(t+k+1) from z_hat(t+1..t+T) and commands (targets: the expert critic)."""

    def __init__(self, latent_dim: int, cmd_dim: int, horizon: int, layers: int, heads: int, mlp_ratio: int):
        super().__init__(latent_dim, cmd_dim, None, horizon, layers, heads, mlp_ratio)
