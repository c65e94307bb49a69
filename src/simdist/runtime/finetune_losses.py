"""What finetuning minimises: latent consistency of the predicted latents against the frozen encoder's (dynamics
only, as in pretraining; optionally with the measured reward and return read through the frozen heads), and for
the full-finetuning baseline an EMA target encoder, the rewards the robot
measured, and the starting model's heads as anchors."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from simdist.data.windows import WindowBatch
from simdist.model.world_model import Context, WorldModel
from simdist.runtime.finetune_options import FinetuneOptions


def _context_and_target(model: WorldModel, batch: WindowBatch) -> tuple[Context, torch.Tensor]:
    """The windows' context (the frozen encoder's: no gradient) and the target E(o(t+1..t+T)), detached."""
    n = model.normalizer
    with torch.no_grad():
        latent = model.encoder(n.normalize("obs", batch.obs), batch.image)
        past = model.encoder.proprio(n.normalize("obs", batch.obs_hist))
        tokens, key_mask = model.history_tokens(
            past, n.normalize("action", batch.act_hist), batch.hist_mask.bool(), latent
        )
        target = model.encoder(n.normalize("obs", batch.future_obs), batch.future_image)
    return Context(latent, tokens, key_mask, model.dynamics.cross_kv(tokens), []), target


def latent_predictions(model: WorldModel, batch: WindowBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(predicted z_hat(t+1..t+T), target E(o(t+1..t+T))), each (B, T, D); an ensemble predicts its mean.

    Gradients reach only the dynamics (the cross-attention K/V are the dynamics' own projections of the frozen
    context); the target is detached, as in pretraining.
    """
    ctx, target = _context_and_target(model, batch)
    return model._predict(ctx, model.normalizer.normalize("action", batch.actions)), target


def latent_errors(model: WorldModel, batch: WindowBatch) -> torch.Tensor:
    """(B, T) squared latent error per future step."""
    predicted, target = latent_predictions(model, batch)
    return (predicted - target).pow(2).mean(-1)


def training_loss(
    model: WorldModel,
    batch: WindowBatch,
    generator: torch.Generator,
    reward_weight: float = 0.0,
    value_weight: float = 0.0,
    head_weights: dict[str, float] | None = None,
    anchor: HeadAnchor | None = None,
) -> torch.Tensor:
    """The latent-consistency loss every dynamics member trains on, plus, with a weight above 0, the reward the
    robot measured and the return it earned (`batch.value`, `real_data.measured_returns`), read by the frozen
    reward and value heads from each member's predicted latents (`measured_errors`). `head_weights` ({"reward": w,
    "value": w}) adds those heads' errors on what the robot measured with the predicted latents detached: they
    train the heads (where trainable), never the dynamics; `anchor` holds those heads to the starting ones off the
    robot's data (`HeadAnchor`, on the same windows' context).

    One member: the masked mean squared error. An ensemble: each member's own error, each window weighted by a
    Poisson(1) draw per member (the online bootstrap), so the members see different resamples of the data and
    keep disagreeing where the data say nothing.
    """
    ctx, target = _context_and_target(model, batch)
    actions_n = model.normalizer.normalize("action", batch.actions)
    if model.dynamics.members == 1:
        members = model._predict(ctx, actions_n)[None]
        weights = batch.future_mask.float()[None]
    else:
        members = model.dynamics.member_predictions(ctx.latent, actions_n, ctx.dynamics_kv, ctx.key_mask)
        rate = torch.ones(members.shape[:2])
        weights = torch.poisson(rate, generator=generator)[..., None] * batch.future_mask.float()

    def mean(errors: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # each member's weighted mean, averaged
        return ((errors * w).sum((1, 2)) / w.sum((1, 2)).clamp_min(1.0)).mean()

    loss = mean((members - target).pow(2).mean(-1), weights)  # (K, B, T) errors
    for name, weight in (("reward", reward_weight), ("value", value_weight)):
        if weight > 0:
            errors, measured = measured_errors(model, batch, ctx.latent, members, name)
            loss = loss + weight * mean(errors, weights * measured)
    for name, weight in (head_weights or {}).items():
        if weight > 0:
            errors, measured = measured_errors(model, batch, ctx.latent.detach(), members.detach(), name)
            loss = loss + weight * mean(errors, weights * measured)
    if anchor is not None:
        loss = loss + anchor(model, batch, ctx)
    return loss


def measured_errors(
    model: WorldModel, batch: WindowBatch, latent: torch.Tensor, members: torch.Tensor, head: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared error (K, B, T) of the frozen `head` ("reward" or "value"), reading each member's predicted latents
    `members` (K, B, T, D) from z_t `latent` (B, D), against what the robot measured (normalised units): the
    rewards t..t+T-1 (`batch.reward`), or the returns from t+1..t+T (`batch.value`, where real data carries them);
    and where it was measured (B, T; 0 where the bag has none or the episode had ended). Gradients reach the
    latents and the head, whichever requires them (the head is frozen unless it is what trains)."""
    n = model.normalizer
    k = members.shape[0]
    command_n = n.normalize("command", batch.command).repeat(k, 1, 1)
    if head == "reward":
        actions_n = n.normalize("action", batch.actions).repeat(k, 1, 1)
        steps = batch.step_mask.repeat(k, 1)
        out = model._reward(latent.repeat(k, 1), members.flatten(0, 1), actions_n, command_n, steps)
        target = n.normalize("reward", batch.reward)
    else:
        out = model.value(members.flatten(0, 1), command_n, key_mask=batch.future_mask.repeat(k, 1))
        target = n.normalize("value", batch.value)
    # a reward needs step t+k, a return step t+k+1
    exists = batch.step_mask if head == "reward" else batch.future_mask
    measured = (torch.isfinite(target) & exists.bool()).float()
    return (out.unflatten(0, (k, -1)) - torch.nan_to_num(target)).pow(2), measured


class HeadAnchor:
    """Heads trained beside the dynamics, held to the starting heads where the robot measured nothing: on each
    window's action chunk plus Gaussian noise of std `std` (raw action units), the latents the dynamics predict for
    it (no gradient), the squared difference of each trained head's output from the starting head's, averaged, times
    `weight`."""

    def __init__(
        self, model: WorldModel, heads: tuple[str, ...], std: float, seed: int, weight: float = 1.0
    ) -> None:
        self.teacher = copy.deepcopy(model).eval().requires_grad_(False)
        self.heads, self.std, self.weight = heads, std, weight
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, model: WorldModel, batch: WindowBatch, ctx: Context | None = None) -> torch.Tensor:
        """`ctx`: the windows' context where the caller has it (`training_loss`), else encoded here."""
        n = model.normalizer
        noise = torch.randn(batch.actions.shape, generator=self.generator) * self.std
        actions_n = n.normalize("action", batch.actions + noise)
        command_n = n.normalize("command", batch.command)
        with torch.no_grad():
            if ctx is None:
                ctx = _context_and_target(model, batch)[0]
            latents = model._predict(ctx, actions_n)

        def outputs(m: WorldModel, head: str) -> torch.Tensor:
            if head == "reward":
                return m._reward(ctx.latent, latents, actions_n, command_n, batch.step_mask)
            return m.value(latents, command_n, key_mask=batch.future_mask)

        loss = torch.zeros(())
        for head in self.heads:
            with torch.no_grad():
                taught = outputs(self.teacher, head)
            loss = loss + masked_mean((outputs(model, head) - taught).pow(2), batch)
        return self.weight * loss


def masked_mean(errors: torch.Tensor, batch: WindowBatch) -> torch.Tensor:
    mask = batch.future_mask.float()
    return (errors * mask).sum() / mask.sum().clamp_min(1.0)


class FullFinetuneLoss:
    """The full-finetuning baseline's loss, all in normalised units: latent consistency against an EMA target
    encoder; the reward the robot measured (`batch.reward`, NaN where it reported none), weight `reward_weight`;
    and the starting model's outputs on the same windows as anchors, weight `anchor_weight` (its value and policy
    outputs, and its reward where none was measured), so that what the heads read from the encoder is not simply
    forgotten."""

    def __init__(self, model: WorldModel, options: FinetuneOptions) -> None:
        self.teacher = copy.deepcopy(model).eval().requires_grad_(False)
        self.target = copy.deepcopy(model.encoder).eval().requires_grad_(False)
        self.decay = options.target_ema
        self.anchor, self.reward = options.anchor_weight, options.reward_weight

    def __call__(self, model: WorldModel, batch: WindowBatch) -> torch.Tensor:
        out = model(batch)
        n = model.normalizer
        with torch.no_grad():
            target = self.target(n.normalize("obs", batch.future_obs), batch.future_image)
            taught = self.teacher(batch) if self.anchor > 0 else None
        loss = masked_mean((out["latent"] - target).pow(2).mean(-1), batch)
        measured = torch.isfinite(out["reward_target"]) & batch.step_mask.bool()
        if self.reward > 0 and measured.any():
            error = (out["reward"] - torch.nan_to_num(out["reward_target"])).pow(2)
            loss = loss + self.reward * (error * measured).sum() / measured.sum()
        if taught is not None:
            unmeasured = ~measured if self.reward > 0 else torch.ones_like(measured)
            reward_anchor = ((out["reward"] - taught["reward"]).pow(2) * unmeasured).mean()
            anchors = reward_anchor + sum(F.mse_loss(out[k], taught[k]) for k in ("value", "action"))
            loss = loss + self.anchor * anchors
        return loss

    @torch.no_grad()
    def update_target(self, model: WorldModel) -> None:
        for t, s in zip(self.target.parameters(), model.encoder.parameters(), strict=True):
            t.lerp_(s, 1.0 - self.decay)
