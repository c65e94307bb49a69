"""Held-out evaluation: latent prediction error per horizon step, reward/value R^2, behaviour-cloning error."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simdist import atomic
from simdist.data.windows import WindowBatch, WindowSampler
from simdist.model.world_model import Context, WorldModel
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
def heldout_latent_error(
    model: WorldModel,
    sampler: WindowSampler,
    *,
    limit: int | None,
    batch_size: int = 256,
    each: Callable[[WindowBatch, Context, torch.Tensor], None] | None = None,
) -> np.ndarray:
    """Held-out latent MSE per horizon step k = 1..T (mean over real future steps) on up to `limit` evenly spaced
    windows of `sampler`, against the model's own encoder; the model in the mode the caller left it in.

    `each(batch, context, predicted latents)` is called for every batch (on the model's device), so that other
    metrics can be gathered in the same pass (`evaluate`).
    """
    device = next(model.parameters()).device
    sums = np.zeros(sampler.horizon)
    counts = np.zeros(sampler.horizon)
    for batch in sampler.iterate(batch_size, limit):
        batch = batch.to(device)
        ctx = model.context(batch.obs_hist, batch.act_hist, batch.hist_mask, batch.obs, batch.image)
        latents = model.predict(ctx, batch.actions)
        target = model.encoder(model.normalizer.normalize("obs", batch.future_obs), batch.future_image)
        mask = batch.future_mask.float()
        sums += ((latents - target).pow(2).mean(-1) * mask).sum(0).cpu().numpy()
        counts += mask.sum(0).cpu().numpy()
        if each is not None:
            each(batch, ctx, latents)
    return sums / np.maximum(counts, 1.0)


def latent_by_horizon_plot(
    curves: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str,
    ylabel: str = "held-out latent MSE",
    log_scale: bool = False,
    figsize: tuple[float, float] = (6.0, 4.0),
    legend_fontsize: float | None = None,
    dpi: int = 110,
) -> None:
    """Latent error against prediction step k = 1..T, one line per curve (a legend when they are named), written
    atomically as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    for name, values in curves.items():
        ax.plot(np.arange(1, len(values) + 1), values, marker="o", markersize=3, label=name)
    ax.set_xlabel("prediction step k (z_hat(t+k))")
    ax.set_ylabel(ylabel)
    if log_scale:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if any(curves):
        ax.legend(fontsize=legend_fontsize)
    fig.tight_layout()
    atomic.write_figure(fig, path, dpi=dpi)


@torch.no_grad()
def evaluate(
    model: WorldModel, sampler: WindowSampler, *, batch_size: int = 256, limit: int | None = 4096
) -> EvalResult:
    """Metrics over up to `limit` evenly spaced windows of `sampler` (held-out episodes), model in eval mode."""
    model.eval()
    pairs: dict[str, list[np.ndarray]] = {"reward": [], "reward_hat": [], "value": [], "value_hat": []}
    act_sum = act_count = 0.0
    windows = 0

    def gather(batch: WindowBatch, ctx: Context, latents: torch.Tensor) -> None:
        nonlocal act_sum, act_count, windows
        rewards, values = model.score(ctx, latents, batch.actions, batch.command)
        actions = model.propose(ctx, batch.command)
        masks = loss_masks(batch)
        keep, scored = masks["dynamics"].bool(), masks["reward"].bool()
        pairs["reward"].append(batch.reward[scored].cpu().numpy())
        pairs["reward_hat"].append(rewards[scored].cpu().numpy())
        pairs["value"].append(batch.value[keep].cpu().numpy())
        pairs["value_hat"].append(values[keep].cpu().numpy())
        act_err = (actions - batch.actions).pow(2).mean(-1)
        act_sum += float((act_err * masks["action"]).sum())
        act_count += float(masks["action"].sum())
        windows += len(batch)

    latent = heldout_latent_error(model, sampler, limit=limit, batch_size=batch_size, each=gather)
    flat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in pairs.items()}
    return EvalResult(
        latent_mse=[float(x) for x in latent],
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
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = out_dir / "metrics.json"
    atomic.write_json(metrics, result.to_dict())
    png = out_dir / "latent_error.png"
    latent_by_horizon_plot({"": result.latent_mse}, png, title=title, ylabel="latent MSE (held-out)", dpi=120)
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
