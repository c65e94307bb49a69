"""Context tokens: past observations (same proprio encoder) and past actions, interleaved, then z_t."""

from __future__ import annotations

import torch
from torch import nn


class History(nn.Module):
    """(B, H) past steps -> (B, 2H + 1, D) tokens [o_0, a_0, ..., o_H-1, a_H-1, z_t] and their key mask."""

    def __init__(self, act_dim: int, latent_dim: int, history: int) -> None:
        super().__init__()
        self.action = nn.Linear(act_dim, latent_dim)
        self.time = nn.Parameter(torch.randn(history, latent_dim) * 0.02)
        self.kind = nn.Parameter(torch.randn(3, latent_dim) * 0.02)  # observation, action, current latent

    def forward(
        self,
        obs_features: torch.Tensor,
        act_hist: torch.Tensor,
        hist_mask: torch.Tensor,
        latent: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, h, d = obs_features.shape
        obs_tok = obs_features + self.time[:h] + self.kind[0]
        act_tok = self.action(act_hist) + self.time[:h] + self.kind[1]
        tokens = torch.stack([obs_tok, act_tok], dim=2).reshape(b, 2 * h, d)
        current = (latent + self.kind[2]).unsqueeze(1)
        mask = torch.cat([hist_mask.repeat_interleave(2, dim=1), hist_mask.new_ones(b, 1)], dim=1)
        return torch.cat([tokens, current], dim=1), mask
