"""Held-out evaluation: latent prediction error per horizon step, reward/value R^2, behaviour-cloning error."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simdist import atomic
from simdist.data.windows import WindowSampler
from simdist.model.world_model import WorldModel
from simdist.train.losses import loss_masks


@dataclasses.dataclass
class EvalResult:
    latent_mse: list[float]  # per horizon step k = 1..T (latent units)
    reward_r2: float
    value_r2: float
    action_mse: float  # raw action units, on expert chunks
    reward_mse: float  # raw units
    value_mse: float  # raw units
    windows: int
    episodes: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@torch.no_grad()
def evaluate(
    model: WorldModel, sampler: WindowSampler, *, batch_size: int = 256, limit: int | None = 4096
) -> EvalResult:
    """Metrics over up to `limit` evenly spaced windows of `sampler` (held-out episodes), model in eval mode."""
    model.eval()
    device = next(model.parameters()).device
    horizon = sampler.horizon
    lat_sum = np.zeros(horizon)
    lat_count = np.zeros(horizon)
    pairs: dict[str, list[np.ndarray]] = {"reward": [], "reward_hat": [], "value": [], "value_hat": []}
    act_sum = act_count = 0.0
    windows = 0
    for batch in sampler.iterate(batch_size, limit):
        batch = batch.to(device)
        ctx = model.context(batch.obs_hist, batch.act_hist, batch.hist_mask, batch.obs, batch.image)
        latents = model.predict(ctx, batch.actions)
        target = model.encoder(model.normalizer.normalize("obs", batch.future_obs), batch.future_image)
        rewards, values = model.score(ctx, latents, batch.actions, batch.command)
        actions = model.propose(ctx, batch.command)
        masks = loss_masks(batch)
        future = masks["dynamics"]
        err = (latents - target).pow(2).mean(-1)
        lat_sum += (err * future).sum(0).cpu().numpy()
        lat_count += future.sum(0).cpu().numpy()
        keep = future.bool()
        pairs["reward"].append(batch.reward[keep].cpu().numpy())
        pairs["reward_hat"].append(rewards[keep].cpu().numpy())
        pairs["value"].append(batch.value[keep].cpu().numpy())
        pairs["value_hat"].append(values[keep].cpu().numpy())
        act_err = (actions - batch.actions).pow(2).mean(-1)
        act_sum += float((act_err * masks["action"]).sum())
        act_count += float(masks["action"].sum())
        windows += len(batch)
    flat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in pairs.items()}
    return EvalResult(
        latent_mse=[float(x) for x in lat_sum / np.maximum(lat_count, 1)],
        reward_r2=_r2(flat["reward"], flat["reward_hat"]),
        value_r2=_r2(flat["value"], flat["value_hat"]),
        action_mse=act_sum / max(act_count, 1.0),
        reward_mse=float(np.mean((flat["reward"] - flat["reward_hat"]) ** 2))
        if len(flat["reward"])
        else float("nan"),
        value_mse=float(np.mean((flat["value"] - flat["value_hat"]) ** 2))
        if len(flat["value"])
        else float("nan"),
        windows=windows,
        episodes=len(sampler.episodes),
    )


def _r2(target: np.ndarray, prediction: np.ndarray) -> float:
    if len(target) < 2:
        return float("nan")
    total = float(np.sum((target - target.mean()) ** 2))
    residual = float(np.sum((target - prediction) ** 2))
    return 1.0 - residual / total if total > 0 else float("nan")


def save_report(result: EvalResult, out_dir: Path, *, title: str) -> tuple[Path, Path]:
    """metrics.json and latent_error.png (error against horizon step) in `out_dir`, each written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = out_dir / "metrics.json"
    atomic.write_json(metrics, result.to_dict())
    fig, ax = plt.subplots(figsize=(6, 4))
    steps = np.arange(1, len(result.latent_mse) + 1)
    ax.plot(steps, result.latent_mse, marker="o", markersize=3)
    ax.set_xlabel("prediction step k (z_hat(t+k))")
    ax.set_ylabel("latent MSE (held-out)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = out_dir / "latent_error.png"
    atomic.write_figure(fig, png, dpi=120)
    return metrics, png


def result_table(result: EvalResult, title: str) -> Any:
    """A rich Table of the headline numbers."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    lat = result.latent_mse
    rows = [
        ("held-out episodes / windows", f"{result.episodes} / {result.windows}"),
        ("latent MSE, step 1", f"{lat[0]:.4g}"),
        (f"latent MSE, step {len(lat) // 2 + 1}", f"{lat[len(lat) // 2]:.4g}"),
        (f"latent MSE, step {len(lat)}", f"{lat[-1]:.4g}"),
        ("latent MSE, mean over horizon", f"{float(np.mean(lat)):.4g}"),
        ("reward R^2", f"{result.reward_r2:.4f}"),
        ("value R^2", f"{result.value_r2:.4f}"),
        ("reward MSE (raw)", f"{result.reward_mse:.4g}"),
        ("value MSE (raw)", f"{result.value_mse:.4g}"),
        ("behaviour cloning MSE (raw action units)", f"{result.action_mse:.4g}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
