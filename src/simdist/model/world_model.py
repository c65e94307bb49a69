"""The world model: encoder, history, dynamics, reward, value and policy heads behind a raw-units API."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from simdist.model.config import ModelConfig
from simdist.model.dynamics import Dynamics, disagreement
from simdist.model.encoder import Encoder
from simdist.model.heads import RewardHead, ValueHead
from simdist.model.history import History
from simdist.model.layers import KV
from simdist.model.normalizer import Normalizer
from simdist.model.policy import Policy


@dataclasses.dataclass
class Context:
    """What the planner keeps for one control tick: z_t, the context tokens and their cached cross-attention K/V.

    `latent`, `tokens` and `key_mask` have `batch_size` rows (views after `expand`); the K/V keep the batch they
    were computed with, and a batch of 1 is shared by every sample without copying.
    """

    latent: torch.Tensor  # (B, D) z_t
    tokens: torch.Tensor  # (B, 2H + 1, D)
    key_mask: torch.Tensor  # (B, 2H + 1) True where a token is real
    dynamics_kv: list[KV]
    policy_kv: list[KV]

    @property
    def batch_size(self) -> int:
        return self.latent.shape[0]

    def expand(self, n: int) -> Context:
        """The same single context broadcast to n samples, without recomputing anything."""
        if self.batch_size != 1:
            raise ValueError(f"expand needs a context of batch 1, got {self.batch_size}")
        return Context(
            latent=self.latent.expand(n, -1),
            tokens=self.tokens.expand(n, -1, -1),
            key_mask=self.key_mask.expand(n, -1),
            dynamics_kv=self.dynamics_kv,
            policy_kv=self.policy_kv,
        )


class WorldModel(nn.Module):
    """SimDist world model. Public methods take and return raw units; `forward` is the training pass."""

    def __init__(self, obs_dim: int, act_dim: int, cmd_dim: int, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.dims = {"obs_dim": obs_dim, "act_dim": act_dim, "cmd_dim": cmd_dim}
        c, d = config, config.latent_dim
        self.normalizer = Normalizer(obs_dim, act_dim, cmd_dim)
        self.encoder = Encoder(obs_dim, c.encoder_hidden, d, c.image)
        self.history_tokens = History(act_dim, d, c.history)
        self.dynamics = Dynamics(
            act_dim, d, c.horizon, c.dynamics_layers, c.dynamics_heads, c.mlp_ratio, c.dynamics_members
        )
        self.reward = RewardHead(d, cmd_dim, act_dim, c.horizon, c.head_layers, c.head_heads, c.mlp_ratio)
        self.value = ValueHead(d, cmd_dim, c.horizon, c.head_layers, c.head_heads, c.mlp_ratio)
        self.policy = Policy(cmd_dim, act_dim, d, c.horizon, c.policy_layers, c.policy_heads, c.mlp_ratio)

    # -- sizes ----------------------------------------------------------------------------------------------

    @property
    def obs_dim(self) -> int:
        return self.dims["obs_dim"]

    @property
    def act_dim(self) -> int:
        return self.dims["act_dim"]

    @property
    def cmd_dim(self) -> int:
        return self.dims["cmd_dim"]

    @property
    def horizon(self) -> int:
        return self.config.horizon

    @property
    def history(self) -> int:
        return self.config.history

    @property
    def latent_dim(self) -> int:
        return self.config.latent_dim

    # -- planner API (raw units) ----------------------------------------------------------------------------

    def context(
        self,
        obs_hist: torch.Tensor,
        act_hist: torch.Tensor,
        hist_mask: torch.Tensor,
        obs: torch.Tensor,
        image: torch.Tensor | None = None,
    ) -> Context:
        """Encode (B, H, O) past observations, (B, H, A) past actions, (B, H) mask and (B, O) current observation."""
        n = self.normalizer
        latent = self.encoder(n.normalize("obs", obs), image)
        past = self.encoder.proprio(n.normalize("obs", obs_hist))
        tokens, key_mask = self.history_tokens(
            past, n.normalize("action", act_hist), hist_mask.bool(), latent
        )
        return Context(
            latent=latent,
            tokens=tokens,
            key_mask=key_mask,
            dynamics_kv=self.dynamics.cross_kv(tokens),
            policy_kv=self.policy.cross_kv(tokens),
        )

    def predict(self, ctx: Context, actions: torch.Tensor) -> torch.Tensor:
        """Raw actions (N, T, A) -> predicted latents z_hat t+1..t+T (N, T, D)."""
        return self._predict(ctx, self.normalizer.normalize("action", actions))

    def predict_with_disagreement(
        self, ctx: Context, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw actions (N, T, A) -> (the members' mean z_hat (N, T, D), their disagreement (N, T)).

        The disagreement is the variance across the dynamics members in the normalised latent space, averaged over
        its dimensions; zero for a one-member model.
        """
        actions_n = self.normalizer.normalize("action", actions)
        rows = actions_n.shape[0]
        members = self.dynamics.member_predictions(
            self._latent(ctx, rows), actions_n, ctx.dynamics_kv, self._mask_for(ctx, rows)
        )
        return members.mean(0), disagreement(members)

    def score(
        self,
        ctx: Context,
        latents: torch.Tensor,
        actions: torch.Tensor,
        command: torch.Tensor,
        *,
        last_value_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predicted latents (N, T, D), raw actions (N, T, A), raw commands (N or 1, T, C) -> raw rewards, values (N, T).

        `last_value_only`: values (N, 1), the last step's only (what the planner's score needs), for about half
        the value head's cost.
        """
        n = self.normalizer
        reward, value = self._score(
            ctx,
            latents,
            n.normalize("action", actions),
            n.normalize("command", command).expand(latents.shape[0], -1, -1),
            last_value_only=last_value_only,
        )
        # back to raw units in float32 (under bfloat16 autocast the heads' outputs are bfloat16: a Go2 value
        # rounded there moves by more than one step's reward)
        return n.denormalize("reward", reward.float()), n.denormalize("value", value.float())

    def propose(self, ctx: Context, command: torch.Tensor) -> torch.Tensor:
        """Raw commands (1 or N, T, C) -> the base policy's raw action chunk (N, T, A), N = max(command rows, B)."""
        n = self.normalizer
        rows = max(command.shape[0], ctx.batch_size)
        cmd = n.normalize("command", command).expand(rows, -1, -1)
        return n.denormalize("action", self._propose(ctx, cmd))

    # -- normalised internals ---------------------------------------------------------------------------------

    def _latent(self, ctx: Context, rows: int) -> torch.Tensor:
        if ctx.batch_size == rows:
            return ctx.latent
        if ctx.batch_size == 1:
            return ctx.latent.expand(rows, -1)
        raise ValueError(f"context has batch {ctx.batch_size}, inputs have {rows} rows")

    def _predict(self, ctx: Context, actions_n: torch.Tensor) -> torch.Tensor:
        latent = self._latent(ctx, actions_n.shape[0])
        return self.dynamics(latent, actions_n, ctx.dynamics_kv, self._mask_for(ctx, actions_n.shape[0]))

    def _score(
        self,
        ctx: Context,
        latents: torch.Tensor,
        actions_n: torch.Tensor,
        command_n: torch.Tensor,
        *,
        last_value_only: bool = False,
        batch: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`batch`: the training windows the inputs come from, whose padding past an episode's end the heads must
        not attend to (None: a planned chunk, nothing padded)."""
        value = self.value(
            latents,
            command_n,
            last_only=last_value_only,
            key_mask=None if batch is None else batch.future_mask,
        )
        z_t = self._latent(ctx, latents.shape[0])
        return self._reward(
            z_t, latents, actions_n, command_n, None if batch is None else batch.step_mask
        ), value

    def _reward(
        self,
        z_t: torch.Tensor,
        latents: torch.Tensor,
        actions_n: torch.Tensor,
        command_n: torch.Tensor,
        step_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Normalised rewards t..t+T-1 (N, T) from z_t (N, D) and the predicted z_hat t+1..t+T (N, T, D);
        `step_mask` (N, T): the steps t+k that exist, in training windows (the value head's are t+k+1: `future_mask`)."""
        reward_in = torch.cat(
            [z_t.unsqueeze(1), latents[:, :-1]], dim=1
        )  # reward for step t+k is scored from z_t+k
        return self.reward(reward_in, command_n, actions_n, key_mask=step_mask)

    def _propose(self, ctx: Context, command_n: torch.Tensor) -> torch.Tensor:
        latent = self._latent(ctx, command_n.shape[0])
        return self.policy(latent, command_n, ctx.policy_kv, self._mask_for(ctx, command_n.shape[0]))

    def _mask_for(self, ctx: Context, rows: int) -> torch.Tensor:
        # K/V of batch 1 are shared by folding queries (see layers.CrossAttention); otherwise rows must match
        kv_rows = ctx.dynamics_kv[0][0].shape[0] if ctx.dynamics_kv else ctx.batch_size
        if kv_rows != 1 and kv_rows != rows:
            raise ValueError(f"context has batch {kv_rows}, inputs have {rows} rows")
        return ctx.key_mask[:kv_rows] if kv_rows == 1 else ctx.key_mask

    # -- training -----------------------------------------------------------------------------------------------

    def forward(self, batch: Any) -> dict[str, torch.Tensor]:
        """Training pass on a WindowBatch: normalised predictions and targets for every loss term."""
        n = self.normalizer
        ctx = self.context(batch.obs_hist, batch.act_hist, batch.hist_mask, batch.obs, batch.image)
        actions_n = n.normalize("action", batch.actions)
        command_n = n.normalize("command", batch.command)
        latents = self._predict(ctx, actions_n)
        with torch.no_grad():  # the dynamics target is the online encoder with stop-gradient
            target = self.encoder(n.normalize("obs", batch.future_obs), batch.future_image)
        reward, value = self._score(ctx, latents, actions_n, command_n, batch=batch)
        labels = getattr(batch, "expert_action", None)  # DAgger's labels where the batch carries them
        return {
            "latent": latents,
            "latent_target": target,
            "reward": reward,
            "reward_target": n.normalize("reward", batch.reward),
            "value": value,
            "value_target": n.normalize("value", batch.value),
            "action": self._propose(ctx, command_n),
            "action_target": actions_n if labels is None else n.normalize("action", labels),
        }

    # -- construction ------------------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        dims: Mapping[str, int],
        config: ModelConfig,
        stats: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> WorldModel:
        """A model for {obs_dim, act_dim, cmd_dim}, with normaliser statistics in the manifest's format."""
        model = cls(int(dims["obs_dim"]), int(dims["act_dim"]), int(dims["cmd_dim"]), config)
        if stats is not None:
            model.normalizer.load_stats(stats)
        return model
