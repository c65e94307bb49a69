"""What the planner needs from a world model: the only surface it calls, as `typing.Protocol`s.

All tensors are in RAW units (the model normalises inside); shapes use N samples, T = horizon,
H = history length, O/A/C/D = observation, action, command and latent sizes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class Context(Protocol):
    """Everything the model derives from the history and current observation, computed once per tick."""

    def expand(self, n: int) -> Context:
        """The same context broadcast to `n` samples, without recomputing it."""
        ...


@runtime_checkable
class PlanningModel(Protocol):
    """The world-model API the planner plans through (implemented by `simdist.model.WorldModel`).

    A planner with `disagreement_weight` > 0 also calls `predict_with_disagreement(ctx, actions)` ->
    (latents (N,T,D), disagreement (N,T) >= 0), which an ensemble model provides.
    """

    horizon: int
    act_dim: int
    cmd_dim: int

    def context(self, obs_hist: Tensor, act_hist: Tensor, hist_mask: Tensor, obs: Tensor) -> Context:
        """(1,H,O), (1,H,A), (1,H) bool/0-1, (1,O) -> a context for one robot."""
        ...

    def predict(self, ctx: Context, actions: Tensor) -> Tensor:
        """Latents (N,T,D) after each of the actions (N,T,A); `ctx` expanded to N."""
        ...

    def score(
        self,
        ctx: Context,
        latents: Tensor,
        actions: Tensor,
        command: Tensor,
        *,
        last_value_only: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """Per-step rewards and values, (N,T) each, for latents (N,T,D), actions (N,T,A), commands (N,T,C).

        `last_value_only`: the values may be (N,1), the last step's only (a model may still return (N,T)).
        """
        ...

    def propose(self, ctx: Context, command: Tensor) -> Tensor:
        """The base policy's action chunk (1,T,A) for commands (1,T,C)."""
        ...
