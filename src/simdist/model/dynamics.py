"""Latent dynamics: a causal transformer decoder over the T future action tokens, cross-attending to the context.

All T future latents come out of one pass; latent k depends only on actions 0..k (causal self-attention).
This submodule is exactly what dynamics-only finetuning trains and what a dynamics version file holds.

An ensemble (`members` > 1, as in PETS and MOPO) keeps K such decoders side by side on the same frozen encoder:
member 0 is `action` / `decoder` (so a one-member checkpoint has the same keys as before), the others are
`extra.<i>`. The prediction is the members' mean; their disagreement (the variance across members, per step)
tells the planner where the model does not know.
"""

from __future__ import annotations

import torch
from torch import nn

from simdist.model.layers import KV, QueryDecoder


class DynamicsMember(nn.Module):
    """One decoder of the ensemble: action embedding + query decoder, residual on z_t."""

    def __init__(
        self, act_dim: int, latent_dim: int, horizon: int, layers: int, heads: int, mlp_ratio: int
    ) -> None:
        super().__init__()
        self.shape = (act_dim, latent_dim, horizon, layers, heads, mlp_ratio)  # to build a fresh one like it
        self.action = nn.Linear(act_dim, latent_dim)
        self.decoder = QueryDecoder(latent_dim, latent_dim, horizon, layers, heads, mlp_ratio)

    def forward(
        self, latent: torch.Tensor, actions: torch.Tensor, kv: list[KV], key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        x = self.action(actions) + latent.unsqueeze(1)
        return latent.unsqueeze(1) + self.decoder.decode(x, kv, key_mask)


class Dynamics(DynamicsMember):
    def __init__(
        self,
        act_dim: int,
        latent_dim: int,
        horizon: int,
        layers: int,
        heads: int,
        mlp_ratio: int,
        members: int = 1,
    ) -> None:
        super().__init__(act_dim, latent_dim, horizon, layers, heads, mlp_ratio)
        if members < 1:
            raise ValueError(f"dynamics members must be >= 1, got {members}")
        self.extra = nn.ModuleList(
            DynamicsMember(act_dim, latent_dim, horizon, layers, heads, mlp_ratio) for _ in range(members - 1)
        )

    @property
    def members(self) -> int:
        return 1 + len(self.extra)

    def _all(self) -> list[DynamicsMember]:
        return [self, *self.extra]

    def member_state(self) -> dict[str, torch.Tensor]:
        """Member 0's own weights, in the keys every member uses."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("extra.")}

    def copy_member_zero(self) -> None:
        """Every other member becomes a copy of member 0: the ensemble predicts exactly what member 0 alone
        predicts and disagrees nowhere (an ensemble's starting version, safe to deploy)."""
        zero = self.member_state()
        for member in self.extra:
            member.load_state_dict(zero)

    def fresh_members(self, seed: int) -> None:
        """Every other member back to a fresh initialisation (seeded), to learn from scratch."""
        with torch.random.fork_rng():  # the caller's random stream is left as it was
            torch.manual_seed(seed)
            for i, member in enumerate(self.extra):
                self.extra[i] = DynamicsMember(*member.shape).train(member.training)

    def cross_kv(self, context: torch.Tensor) -> list[KV]:
        """Every member's per-layer K/V, member after member (layers x members entries)."""
        out = self.decoder.cross_kv(context)
        for member in self.extra:
            out += member.decoder.cross_kv(context)
        return out

    def member_predictions(
        self, latent: torch.Tensor, actions: torch.Tensor, kv: list[KV], key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """z_t (N, D) and normalised actions (N, T, A) -> each member's z_hat t+1..t+T, (K, N, T, D)."""
        L = len(self.decoder.blocks)  # each member's K/V entries in `kv`
        return torch.stack(
            [
                DynamicsMember.forward(m, latent, actions, kv[i * L : (i + 1) * L], key_mask)
                for i, m in enumerate(self._all())
            ]
        )

    def forward(
        self, latent: torch.Tensor, actions: torch.Tensor, kv: list[KV], key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """z_t (N, D) and normalised actions (N, T, A) -> z_hat t+1..t+T (N, T, D): the members' mean."""
        if not self.extra:
            return DynamicsMember.forward(self, latent, actions, kv, key_mask)
        return self.member_predictions(latent, actions, kv, key_mask).mean(0)


def disagreement(members: torch.Tensor) -> torch.Tensor:
    """(K, N, T, D) member predictions -> (N, T) variance across members, averaged over latent dimensions."""
    if members.shape[0] < 2:
        return members.new_zeros(members.shape[1:3])
    return members.var(0, unbiased=False).mean(-1)
