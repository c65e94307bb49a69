"""Pretraining losses: latent dynamics, reward and value MSE, and behaviour cloning on expert chunks.

Behaviour cloning targets the executed actions along chunks the final expert acted in without noise; with the
corpus's `expert_action` in the batch (DAgger's labels) it targets those instead, at every chunk step the expert's own
clean actions reached from t (step 0 always: whoever acted, the label is what the expert would have done there).

Each term is a masked mean over the GLOBAL batch: local sums are divided by the mask count summed over every
process, so DistributedDataParallel's gradient averaging reproduces one process on the same global batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from simdist.data.windows import WindowBatch
from simdist.train.config import LossWeights


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def loss_masks(batch: WindowBatch) -> dict[str, torch.Tensor]:
    """(B, T) float masks per term. The latent and value terms need step t+k+1; the reward and action terms only
    step t+k (so an episode's last step, where a fall's penalty is, trains the reward head, and the action taken
    there the policy head). Behaviour cloning stops at the first non-expert step of the chunk; with labels it runs
    one step further (step k counts while steps 0..k-1 were the expert's clean actions)."""
    future = batch.future_mask.float()
    steps = batch.step_mask.float()
    reached = torch.cumprod(batch.expert_flag.float(), dim=1)
    if getattr(batch, "expert_action", None) is not None:
        reached = torch.cat([torch.ones_like(reached[:, :1]), reached[:, :-1]], dim=1)
    return {
        "dynamics": future,
        "reward": steps,
        "value": future,
        "action": reached * steps,
    }


def compute_losses(
    out: dict[str, torch.Tensor], batch: WindowBatch, weights: LossWeights, *, distributed: bool = True
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(weighted total for backward, {term: detached global mean}) from `WorldModel.forward` outputs.

    With `distributed=False` the batch is treated as this process's own (no collective calls).
    """
    errors = {
        "dynamics": (out["latent"] - out["latent_target"]).pow(2).mean(-1),
        "reward": (out["reward"] - out["reward_target"]).pow(2),
        "value": (out["value"] - out["value_target"]).pow(2),
        "action": (out["action"] - out["action_target"]).pow(2).mean(-1),
    }
    masks = loss_masks(batch)
    names = list(errors)
    counts = torch.stack([masks[k].sum() for k in names]).detach()
    world = _world() if distributed else 1
    if world > 1:
        dist.all_reduce(counts)
    counts = counts.clamp_min(1.0)
    terms = {k: (errors[k] * masks[k]).sum() * world / counts[i] for i, k in enumerate(names)}
    total = sum(getattr(weights, k) * terms[k] for k in names)
    logged = torch.stack([terms[k].detach() for k in names])
    if world > 1:  # each rank's term is its share times world; the mean over ranks is the global mean
        dist.all_reduce(logged)
        logged = logged / world
    return total, {k: logged[i] for i, k in enumerate(names)}  # type: ignore[return-value]
