"""The planner's candidates judged by the simulator: does the world model rank chunks as the robot's profile would?

On every `every`-th tick of a lockstep run on `sim:<profile>`, just before the tick's action is executed, the
simulator is copied once per chunk and each chunk the planner evaluated that tick is executed open loop in its own
copy for the horizon (stopping where the episode ends). Its true discounted reward sum stands beside the model's
predicted discounted reward sum (the same discount and horizon) and the planner's score (reward plus terminal value,
less any disagreement penalty). The executed chunk (the refitted mean) and the base policy's chunk are rolled out
too. Per tick that gives:
- `reward_policy`: the base policy chunk's true reward sum (the scale of the rest);
- `rank_reward`, `rank_score`: Spearman correlation across the candidates between true reward and the predicted
  reward, and the planner's score (does the model order chunks as the profile does?);
- `spread`: the standard deviation of the candidates' true reward (do they differ enough for ranking to matter?);
- `gain_executed`, `gain_best`: true reward of the executed chunk and of the truly best candidate, minus the base
  policy chunk's (what the search gained over the policy, and what it could have);
- `error_reward`: mean absolute error of the predicted reward sum, `bias_reward` its mean signed error;
- `rank_head_truth`: the same rank correlation for the reward head read on the encoder's latents of the observations
  the rollouts truly met (the head's own ranking, without the dynamics' errors): where it is high and `rank_reward`
  low, the dynamics lose the ranking; where it is low too, the heads do;
- `latent_error_gauss`, `latent_error_policy`: mean squared error (normalised latent space, over the steps before an
  episode end) between the predicted latents and the encoder's latents of the true rollouts, for the Gaussian
  samples and for the samples around the base policy's chunks (how well the dynamics know where the search goes).
Where several of the base policy's chunks compete (`policy_command_scales`, leads), each of them, named by its
command scale and lead (`x0.5`, `x1+2`), also gets, per tick:
- `bias_<chunk>`: its predicted reward sum minus its true one (is the model's optimism the same for every gait?);
- `gain_<chunk>`: its true reward sum minus the base chunk's (which gait truly earns more here);
- `predicted_gain_<chunk>`, `score_gain_<chunk>`: the same difference as the model predicts it, and in the
  planner's score (what the model believes it gains by choosing that gait).
The main run is never touched: the copies are stepped, not the robot, so the audited run is the unaudited one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

TICK_KEYS = (
    "reward_policy",
    "rank_reward",
    "rank_score",
    "spread",
    "gain_executed",
    "gain_best",
    "error_reward",
    "bias_reward",
    "rank_head_truth",
    "latent_error_gauss",
    "latent_error_policy",
)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation of two 1-D arrays (nan when either is constant or shorter than 3)."""
    if len(a) < 3:
        return float("nan")
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(float)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(float)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def rollouts(env: Any, chunks: np.ndarray, discount: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each chunk (n,T,A) executed open loop from its own copy of `env` (one member): the discounted reward sums
    (n,), the proprio observations after each step (n,T,O; after an episode end the last one repeats) and which
    steps ran before that end (n,T) bool (the step that ends it counts, its penalty too)."""
    n, horizon = chunks.shape[:2]
    sums = np.zeros(n)
    valid = np.zeros((n, horizon), dtype=bool)
    proprio: list[list[np.ndarray]] = []
    for i, chunk in enumerate(chunks):
        sim = copy.deepcopy(env)
        seen: list[np.ndarray] = []
        for k, action in enumerate(chunk):
            obs, reward, _, _, info = sim.step(action[None])
            sums[i] += discount**k * float(reward[0])
            valid[i, k] = True
            # at an episode's end the env has reset: the step's own observation is the final one
            seen.append(np.asarray((info["final_obs"] if info["done"][0] else obs)["proprio"][0], np.float32))
            if info["done"][0]:  # a fall (its penalty counted) or the episode's end
                break
        sim.close()
        proprio.append(seen + [seen[-1]] * (horizon - len(seen)))
    return sums, np.asarray(proprio, np.float32), valid


class Auditor:
    """Attach to a DeployLoop (`attach`, after its first tick); `records` gets one dict per audited tick."""

    def __init__(self, every: int, discount: float) -> None:
        if every < 1:
            raise ValueError(f"audit every {every} ticks: must be >= 1")
        self.every = every
        self.discount = discount
        self.records: list[dict[str, float]] = []
        self._candidates: list[tuple[Tensor, Tensor]] = []
        self._planned: tuple[Any, Tensor, Any] | None = None  # (context, command, plan) of the latest tick
        self._ticks = 0

    def attach(self, loop: Any) -> None:
        planner, actuator = loop.planner, loop.actuator
        planner.on_candidates = lambda chunks, scores: self._candidates.append(
            (chunks.clone(), scores.clone())
        )
        act = planner.act

        def act_and_keep(ctx: Any, command: Tensor, *args: Any, **kwargs: Any) -> Any:
            self._candidates.clear()
            plan = act(ctx, command, *args, **kwargs)
            self._planned = (ctx, command, plan)
            return plan

        planner.act = act_and_keep
        apply = actuator.apply

        def audit_then_apply(action: np.ndarray, state: Any, now: float) -> Any:
            self._ticks += 1
            if self._ticks % self.every == 0 and self._planned is not None and self._candidates:
                self._audit(loop.robot.env, planner)
            self._planned = None
            return apply(action, state, now)

        actuator.apply = audit_then_apply

    def _audit(self, env: Any, planner: Any) -> None:
        ctx, command, plan = self._planned  # type: ignore[misc]
        chunks = torch.cat([c for c, _ in self._candidates])
        scores = torch.cat([s for _, s in self._candidates]).numpy().astype(float)
        model, horizon = planner.model, planner.horizon
        n = len(chunks)
        discounts = self.discount ** torch.arange(horizon, dtype=torch.float32)
        with torch.inference_mode():
            cmd = torch.as_tensor(command, dtype=torch.float32).reshape(1, 1, -1).expand(n, horizon, -1)
            latents = model.predict(ctx.expand(n), chunks)
            rewards, _ = model.score(ctx.expand(n), latents, chunks, cmd, last_value_only=True)
            predicted = (rewards @ discounts).numpy().astype(float)
        cfg = planner.config
        n_gauss = cfg.num_samples
        first = len(self._candidates[0][0])  # the first iteration's: its Gaussian samples, then the policy's
        has_policy = cfg.num_policy_samples > 0 and first > n_gauss
        extra = [plan.actions.numpy()] + ([chunks[n_gauss].numpy()] if has_policy else [])
        truth, seen, valid = rollouts(env, np.concatenate([chunks.numpy(), np.stack(extra)]), self.discount)
        true_c, true_executed = truth[:n], truth[n]
        base = truth[n + 1] if has_policy else float("nan")
        finite = np.isfinite(scores)
        with torch.inference_mode():  # the heads and the encoder on what truly happened
            norm = model.normalizer
            true_latents = model.encoder(norm.normalize("obs", torch.from_numpy(seen[:n])), None)
            head_rewards, _ = model.score(ctx.expand(n), true_latents, chunks, cmd, last_value_only=True)
            mask = torch.from_numpy(valid[:n]).float()
            head_truth = ((head_rewards * mask) @ discounts).numpy().astype(float)
            squared = ((latents - true_latents) ** 2).mean(-1)
            per_chunk = ((squared * mask).sum(1) / mask.sum(1)).numpy().astype(float)
        record: dict[str, float] = {
            "reward_policy": float(base),
            "rank_reward": spearman(predicted, true_c),
            "rank_score": spearman(scores[finite], true_c[finite]),
            "spread": float(np.std(true_c)),
            "gain_executed": float(true_executed - base),
            "gain_best": float(true_c.max() - base),
            "error_reward": float(np.mean(np.abs(predicted - true_c))),
            "bias_reward": float(np.mean(predicted - true_c)),
            "rank_head_truth": spearman(head_truth, true_c),
            # later iterations' candidates are Gaussian samples again
            "latent_error_gauss": float(np.concatenate([per_chunk[:n_gauss], per_chunk[first:]]).mean()),
            "latent_error_policy": float(per_chunk[n_gauss:first].mean())
            if first > n_gauss
            else float("nan"),
        }
        # the policy's own chunks (each gait, each lead) side by side, where several compete
        if has_policy and cfg.policy_chunks > 1:
            for i, label in enumerate(proposal_labels(cfg)):
                j = n_gauss + i
                record[f"bias_{label}"] = float(predicted[j] - true_c[j])
                record[f"gain_{label}"] = float(true_c[j] - base)
                record[f"predicted_gain_{label}"] = float(predicted[j] - predicted[n_gauss])
                record[f"score_gain_{label}"] = float(scores[j] - scores[n_gauss])
        self.records.append(record)


def proposal_labels(cfg: Any) -> list[str]:
    """Names of the base policy's competing chunks in the planner's order (command scale major, lead minor):
    `x<scale>`, with `+<lead>` where leads compete."""
    scales = (1.0, *cfg.policy_command_scales)
    leads = range(cfg.policy_max_lead + 1)
    return [f"x{scale:g}" + (f"+{lead}" if cfg.policy_max_lead else "") for scale in scales for lead in leads]


def summarise(records: list[dict[str, float]]) -> dict[str, Any]:
    """Mean and standard error over audited ticks of each per-tick figure (nan ticks left out)."""
    out: dict[str, Any] = {"ticks": len(records)}
    for key in figure_keys(records):
        values = np.array([r[key] for r in records], dtype=float)
        values = values[np.isfinite(values)]
        mean = float(values.mean()) if len(values) else float("nan")
        stderr = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
        out[key] = {"mean": mean, "stderr": stderr}
    return out


def figure_keys(records: list[dict[str, float]]) -> list[str]:
    """TICK_KEYS, then the per-chunk figures the records carry, in their first appearance's order."""
    extra = dict.fromkeys(k for r in records for k in r if k not in TICK_KEYS)
    return [*TICK_KEYS, *extra]


def auditing(every: int | None, discount: float) -> tuple[Auditor | None, Callable[[Any], None] | None]:
    """(auditor, on_start for `evaluate_on_robot`), or (None, None) when not auditing."""
    if not every:
        return None, None
    auditor = Auditor(every, discount)
    return auditor, auditor.attach
