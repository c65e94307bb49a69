"""Base policy head: a causal transformer decoder over command tokens that outputs a T x action chunk."""

from __future__ import annotations

import torch
from torch import nn

from simdist.model.layers import KV, QueryDecoder


class Policy(nn.Module):
    def __init__(
        self,
        cmd_dim: int,
        act_dim: int,
        latent_dim: int,
        horizon: int,
        layers: int,
        heads: int,
        mlp_ratio: int,
    ) -> None:
        super().__init__()
        self.command = nn.Linear(cmd_dim, latent_dim)
        self.decoder = QueryDecoder(latent_dim, act_dim, horizon, layers, heads, mlp_ratio)

    def cross_kv(self, context: torch.Tensor) -> list[KV]:
        return self.decoder.cross_kv(context)

    def forward(
        self, latent: torch.Tensor, command: torch.Tensor, kv: list[KV], key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """z_t (N, D) and normalised commands (N, T, C) -> normalised actions (N, T, A)."""
        return self.decoder.decode(self.command(command) + latent.unsqueeze(1), kv, key_mask)
