"""Latent dynamics: a causal transformer decoder over the T future action tokens, cross-attending to the context.

All T future latents come out of one pass; latent k depends only on actions 0..k (causal self-attention).
This submodule is exactly what dynamics-only finetuning trains and what a dynamics version file holds.
"""

from __future__ import annotations

import torch
from torch import nn

from simdist.model.layers import KV, QueryDecoder


class Dynamics(nn.Module):
    def __init__(
        self, act_dim: int, latent_dim: int, horizon: int, layers: int, heads: int, mlp_ratio: int
    ) -> None:
        super().__init__()
        self.action = nn.Linear(act_dim, latent_dim)
        self.decoder = QueryDecoder(latent_dim, latent_dim, horizon, layers, heads, mlp_ratio)

    def cross_kv(self, context: torch.Tensor) -> list[KV]:
        return self.decoder.cross_kv(context)

    def forward(
        self, latent: torch.Tensor, actions: torch.Tensor, kv: list[KV], key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """z_t (N, D) and normalised actions (N, T, A) -> z_hat t+1..t+T (N, T, D), as residuals on z_t."""
        x = self.action(actions) + latent.unsqueeze(1)
        return latent.unsqueeze(1) + self.decoder.decode(x, kv, key_mask)
