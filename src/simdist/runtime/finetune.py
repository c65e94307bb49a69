"""Dynamics-only finetuning on deployment bags, with a validation gate, and the `simdist finetune` verb.

Only `model.dynamics` trains; encoder, history, reward, value, policy and normaliser stay bit-identical (checked
before anything is published). Loss: latent consistency against the frozen encoder,
mean_k || z_hat(t+k) - E(o(t+k)) ||^2 over the real future steps, as in pretraining. Two disjoint sets of held-out
real episodes: one selects the best step (early stopping), the other decides the gate, so a version is refused
unless its latent error is lower than the current one's on episodes that played no part in choosing it.
Bags are read (and refused) before anything is written. Nothing here imports the simulator.

`trainable="all"` is the full-finetuning (forgetting) baseline of `simdist experiment`, made as strong as is
reasonable: every parameter trains on the real windows, latent targets come from an EMA of the encoder, and the
starting model's reward, value and policy outputs anchor the heads; it writes a model of its own (never the
weights that the source's dynamics versions share), so only a freshly loaded model sees it (no hot swap).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import shutil
import time
import typing
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from simdist import atomic
from simdist.bags import read_episodes, schema
from simdist.data.dataset import InMemoryEpisodes, ShardDataset
from simdist.data.windows import WindowBatch, WindowSampler, held_out
from simdist.errors import BagError, CheckpointError, ConfigError, DatasetError
from simdist.model.checkpoint import (
    current_version,
    load_checkpoint,
    publish_dynamics,
    read_description,
    save_checkpoint,
    version_label,
)
from simdist.model.world_model import Context, WorldModel
from simdist.train.evaluate import heldout_latent_error, latent_by_horizon_plot
from simdist.train.schedule import learning_rate

REPORTS_DIR = "reports"


def _option(default: Any, help: str | None = None) -> Any:
    """A `FinetuneOptions` field; one with `help` is also a command-line option (`add_option_arguments`)."""
    return dataclasses.field(default=default, metadata={"help": help} if help else {})


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
    """Defaults from the paper's real-world adaptation (batch 32, lr 2e-4 after a warm-up, 95/5 split).

    The one place each option's default and help are given: `simdist finetune`, `simdist adapt` and the ROS
    `finetune_dynamics` node generate their flags from these fields (`add_option_arguments`).
    """

    batch_size: int = _option(32, "windows per batch")
    lr: float = _option(2e-4, "learning rate after the warm-up")
    # at most a quarter of the planned steps, so that a small run still trains
    warmup_steps: int = _option(2000, "learning-rate warm-up steps")
    max_epochs: int = _option(100, "passes over the real data at most")
    max_steps: int | None = _option(None, "optimiser steps at most (default: as many as --max-epochs allows)")
    # Wall-clock budget. The paper's 100 epochs of 15 minutes of data take ~75 min on a 2-core CPU; held-out latent
    # error has done most of its fall after ~6000 steps (~3.5 min at one thread), so a round is capped at 4 minutes.
    max_minutes: float | None = _option(4.0, "wall-clock training budget in minutes (0: none)")
    val_fraction: float = _option(0.05, "share of the real episodes held out (early stopping and the gate)")
    eval_every: int = _option(250, "steps between held-out evaluations (early stopping)")
    eval_windows: int = 2048
    patience: int = _option(6, "evaluations without improvement before stopping")
    grad_clip: float = 1.0
    min_improvement: float = _option(
        0.0, "the gate: relative held-out improvement a version needs to be published"
    )
    sim_data: str | None = _option(None, "simulation dataset folder to mix in")
    sim_share: float = _option(0.2, "share of each batch from --sim-data, when one is given")
    seed: int = _option(0, "random seed")
    threads: int = _option(
        0, "torch threads (0: torch's choice; 1 beside a running robot, so control is not contended)"
    )
    # "dynamics" (SimDist: every dynamics member), "all" (the full-finetuning baseline), or "new_members" (an
    # ensemble's members 1..K-1 only, member 0 kept: how `simdist ensemble` trains fresh members)
    trainable: str = "dynamics"
    # Full finetuning only (trainable="all"), so that the forgetting baseline is the strongest reasonable one:
    # latent targets from an exponential moving average of the encoder (not the encoder being trained), and the
    # starting model's reward, value and policy outputs on the same real windows as anchors (weight below).
    target_ema: float = 0.99
    anchor_weight: float = 1.0


def add_option_arguments(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """`--name-with-dashes` for each named `FinetuneOptions` field, its type, default and help from the dataclass."""
    hints = typing.get_type_hints(FinetuneOptions)
    fields = {f.name: f for f in dataclasses.fields(FinetuneOptions)}
    for name in names:
        field = fields[name]
        if "help" not in field.metadata:
            raise ValueError(f"FinetuneOptions.{name} is not a command-line option")
        kind = next(t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None))
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=kind, default=field.default, help=field.metadata["help"]
        )


def options_from_args(args: argparse.Namespace, names: Sequence[str]) -> FinetuneOptions:
    """The options `add_option_arguments(parser, names)` parsed (--max-minutes 0: no budget); the rest default."""
    values = {name: getattr(args, name) for name in names}
    if "max_minutes" in values:
        values["max_minutes"] = values["max_minutes"] or None
    return FinetuneOptions(**values)


@dataclasses.dataclass
class FinetuneReport:
    model: str
    bags: list[str]
    base_version: int
    version: int | None  # the published version, None when the gate refused
    published: bool
    reason: str
    latent_before: list[float]  # held-out latent MSE per horizon step, current dynamics
    latent_after: list[float]  # the same for the finetuned dynamics
    steps: int
    epochs: float
    seconds: float
    train_windows: int
    heldout_windows: int
    train_episodes: int
    heldout_episodes: int  # the gate's episodes (latent_before/after), apart from the selection's
    minutes_of_data: float
    selection_episodes: int = 0  # the episodes that chose the best step
    report_json: str = ""
    report_png: str = ""

    @property
    def before(self) -> float:
        return float(np.mean(self.latent_before))

    @property
    def after(self) -> float:
        return float(np.mean(self.latent_after))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "mean_before": self.before, "mean_after": self.after}


# -- bags -> episodes ----------------------------------------------------------------------------------------------


def episode_id_base(bag: Path) -> int:
    """A run's episode-id base, unique across runs: a hash of the bag's absolute path (ids: base + stretch_id)."""
    return (zlib.crc32(str(Path(bag).resolve()).encode()) & 0x7FFFFFFF) << 20


def stretch_id(episode: dict[str, np.ndarray]) -> int:
    """A run-local id for one gap-free stretch of an episode (the episode's index while it has no gap)."""
    return int(episode["episode_index"][0]) + (int(episode["segment"][0]) << 12)


def real_episodes(bags: Sequence[str | Path]) -> list[dict[str, np.ndarray]]:
    """Every episode of every bag in the dataset's per-step format, ready for `InMemoryEpisodes`.

    Real data has no reward, critic value or expert flag: they are zeros and False (weight 0 in the dynamics-only
    loss). `episode` is unique across runs. Raises BagError (naming the bag and topic) before returning anything.
    """
    out: list[dict[str, np.ndarray]] = []
    widths: dict[str, tuple[int, Path]] = {}
    for bag in bags:
        path = Path(bag)
        base = episode_id_base(path)
        for episode in read_episodes(path):
            n = len(episode["proprio"])
            for key, topic in (
                ("proprio", schema.OBSERVATION),
                ("action", schema.ACTION),
                ("command", schema.COMMAND),
            ):
                width = episode[key].shape[1]
                first = widths.setdefault(key, (width, path))
                if first[0] != width:
                    raise BagError(f"{path}: topic {topic} has {width} values, {first[1]} has {first[0]}")
            out.append(
                {
                    "proprio": episode["proprio"],
                    "action": episode["action"],
                    "command": episode["command"],
                    "reward": np.zeros(n, np.float32),
                    "value": np.zeros(n, np.float32),
                    "expert_flag": np.zeros(n, bool),
                    "episode": np.full(n, base + stretch_id(episode), np.int64),
                    "step": episode["step"].astype(np.int32),
                    "timestamp_ns": episode["timestamp_ns"],
                }
            )
    return out


def check_dims(episodes: list[dict[str, np.ndarray]], model: WorldModel, bags: Sequence[str | Path]) -> None:
    wanted = {
        "proprio": (model.obs_dim, schema.OBSERVATION),
        "action": (model.act_dim, schema.ACTION),
        "command": (model.cmd_dim, schema.COMMAND),
    }
    for key, (dim, topic) in wanted.items():
        width = episodes[0][key].shape[1]
        if width != dim:
            raise BagError(f"{Path(bags[0])}: topic {topic} has {width} values, the model takes {dim}")


def minutes_of_data(episodes: list[dict[str, np.ndarray]]) -> float:
    """Robot minutes in the episodes (steps times the median control period of the logged timestamps)."""
    steps = sum(len(e["proprio"]) for e in episodes)
    gaps = np.concatenate(
        [np.diff(e["timestamp_ns"]) for e in episodes if len(e["timestamp_ns"]) > 1] or [[0]]
    )
    return steps * float(np.median(gaps)) / 1e9 / 60.0


DECIDE_SALT = 0x5DEECE66D  # a second, independent hash of the episode ids for the gate's own split


def split_real(
    episodes: list[dict[str, np.ndarray]], fraction: float
) -> tuple[InMemoryEpisodes, np.ndarray, np.ndarray, np.ndarray]:
    """(source, train, select, decide positions): three disjoint sets of whole episodes.

    `select` picks the best step (early stopping); `decide` is only used by the gate, so "held-out error went
    down" is never measured on the windows that chose the checkpoint. Each gets about `fraction` of the episodes
    and at least one; with fewer than three episodes the longest is cut in two until there are three.
    """
    episodes = [
        e for e in episodes if len(e["proprio"]) >= 2
    ]  # a single step (a stretch between gaps) has no window
    if not episodes:
        raise BagError("too little data to hold out: no episode of two steps or more")
    while len(episodes) < 3:
        longest = max(range(len(episodes)), key=lambda i: len(episodes[i]["proprio"]))
        e = episodes.pop(longest)
        cut = len(e["proprio"]) // 2
        if cut < 2 or len(e["proprio"]) - cut < 2:
            raise BagError("too little data to hold out: fewer than three episodes of a few steps")
        head = {k: v[:cut] for k, v in e.items()}
        tail = {k: v[cut:] for k, v in e.items()}
        tail["episode"] = tail["episode"] + (1 << 19)  # below the next run's id base
        episodes += [head, tail]
    source = InMemoryEpisodes(episodes)
    ids = source.episode_ids()
    select = held_out(ids, fraction)
    rest = np.flatnonzero(~select)
    decide = np.zeros_like(select)
    decide[rest] = held_out(ids[rest] ^ DECIDE_SALT, fraction * len(ids) / len(rest))
    if decide[rest].all():
        decide[rest[-1]] = False
    return source, np.flatnonzero(~select & ~decide), np.flatnonzero(select), np.flatnonzero(decide)


# -- the loss ------------------------------------------------------------------------------------------------------


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


def training_loss(model: WorldModel, batch: WindowBatch, generator: torch.Generator) -> torch.Tensor:
    """The latent-consistency loss every dynamics member trains on.

    One member: the masked mean squared error. An ensemble: each member's own error, each window weighted by a
    Poisson(1) draw per member (the online bootstrap), so the members see different resamples of the data and
    keep disagreeing where the data say nothing.
    """
    dynamics = model.dynamics
    if dynamics.members == 1:
        return masked_mean(latent_errors(model, batch), batch)
    ctx, target = _context_and_target(model, batch)
    members = dynamics.member_predictions(
        ctx.latent, model.normalizer.normalize("action", batch.actions), ctx.dynamics_kv, ctx.key_mask
    )
    errors = (members - target).pow(2).mean(-1)  # (K, B, T)
    rate = torch.ones(errors.shape[:2])
    weights = torch.poisson(rate, generator=generator)[..., None] * batch.future_mask.float()
    return ((errors * weights).sum((1, 2)) / weights.sum((1, 2)).clamp_min(1.0)).mean()


def masked_mean(errors: torch.Tensor, batch: WindowBatch) -> torch.Tensor:
    mask = batch.future_mask.float()
    return (errors * mask).sum() / mask.sum().clamp_min(1.0)


class FullFinetuneLoss:
    """The full-finetuning baseline's loss: latent consistency against an EMA target encoder, plus the starting
    model's reward, value and policy outputs on the same windows as anchors (so that what the heads read from the
    encoder is not simply forgotten), all in normalised units."""

    def __init__(self, model: WorldModel, options: FinetuneOptions) -> None:
        self.teacher = copy.deepcopy(model).eval().requires_grad_(False)
        self.target = copy.deepcopy(model.encoder).eval().requires_grad_(False)
        self.decay, self.anchor = options.target_ema, options.anchor_weight

    def __call__(self, model: WorldModel, batch: WindowBatch) -> torch.Tensor:
        out = model(batch)
        n = model.normalizer
        with torch.no_grad():
            target = self.target(n.normalize("obs", batch.future_obs), batch.future_image)
            taught = self.teacher(batch) if self.anchor > 0 else None
        loss = masked_mean((out["latent"] - target).pow(2).mean(-1), batch)
        if taught is not None:
            anchors = sum(F.mse_loss(out[k], taught[k]) for k in ("reward", "value", "action"))
            loss = loss + self.anchor * anchors
        return loss

    @torch.no_grad()
    def update_target(self, model: WorldModel) -> None:
        for t, s in zip(self.target.parameters(), model.encoder.parameters(), strict=True):
            t.lerp_(s, 1.0 - self.decay)


def _concat(a: WindowBatch, b: WindowBatch) -> WindowBatch:
    fields = {}
    for f in dataclasses.fields(WindowBatch):
        x, y = getattr(a, f.name), getattr(b, f.name)
        fields[f.name] = None if x is None or y is None else torch.cat([x, y])
    return WindowBatch(**fields)


def _frozen_state(model: WorldModel, trained_prefix: str) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith(trained_prefix)}


# -- finetuning ----------------------------------------------------------------------------------------------------


def finetune(
    model_dir: str | Path,
    bags: Sequence[str | Path],
    options: FinetuneOptions | None = None,
    *,
    out: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> FinetuneReport:
    """Finetune the current dynamics of `model_dir` on `bags`; publish the result if it passes the gate.

    Full finetuning (`trainable="all"`) changes weights that every dynamics version of `model_dir` shares, so it
    never publishes there: it writes a model of its own to `out` (required, must not exist), and the report's
    `model` names it.

    Raises:
        BagError: a bag is missing, unreadable, truncated or empty, lacks a topic, or does not fit the model.
        CheckpointError, DatasetError: a bad checkpoint or simulation dataset. Nothing is written in any of these cases.
    """
    start_time = time.perf_counter()
    options = options or FinetuneOptions()
    say = log or (lambda message: None)
    if not bags:
        raise BagError("no bags given")
    folder = Path(model_dir)
    if options.trainable == "all" and (out is None or Path(out).exists()):
        raise ConfigError(
            "full finetuning writes a model of its own: give a new folder as out"
            + ("" if out is None else f" ({out} exists)")
        )
    episodes = real_episodes(bags)  # every refusal happens here, before anything is written
    base_version = current_version(folder)
    model = load_checkpoint(folder, version=base_version).eval()
    check_dims(episodes, model, bags)
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    source, train_idx, select_idx, decide_idx = split_real(episodes, options.val_fraction)
    train = WindowSampler(source, model.history, model.horizon, train_idx)
    select = WindowSampler(source, model.history, model.horizon, select_idx)
    heldout = WindowSampler(source, model.history, model.horizon, decide_idx)
    if len(train) == 0 or len(select) == 0 or len(heldout) == 0:
        raise BagError(f"{Path(bags[0])}: too few steps for training and held-out windows")
    sim = _sim_sampler(options, model)

    trainable = {"all": model, "dynamics": model.dynamics, "new_members": model.dynamics.extra}
    if options.trainable not in trainable:
        raise ConfigError(f"trainable must be one of {', '.join(trainable)}, got '{options.trainable}'")
    full = options.trainable == "all"
    trained: torch.nn.Module = trainable[options.trainable]
    frozen = (
        {}
        if full
        else _frozen_state(model, "dynamics.extra." if trained is model.dynamics.extra else "dynamics.")
    )
    if not list(trained.parameters()):
        raise ConfigError("trainable 'new_members' needs a model with more than one dynamics member")
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(trained.parameters())
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=options.lr)

    limit = options.eval_windows
    before = heldout_latent_error(model, heldout, limit=limit)
    say(
        f"held-out latent error of {version_label(base_version)}: {before.mean():.5f} ({len(heldout)} windows)"
    )
    best = float(heldout_latent_error(model, select, limit=limit).mean())
    best_state, since = copy.deepcopy(trained.state_dict()), 0
    per_epoch = math.ceil(len(train) / options.batch_size)
    total = options.max_epochs * per_epoch
    if options.max_steps is not None:
        total = min(total, options.max_steps)
    warmup = min(options.warmup_steps, max(1, total // 4))
    n_sim = round(options.batch_size * options.sim_share) if sim is not None else 0
    rng = np.random.default_rng(options.seed)
    bootstrap = torch.Generator().manual_seed(options.seed)
    full_loss = FullFinetuneLoss(model, options) if full else None
    step = 0
    while step < total:
        lr = learning_rate(step, peak=options.lr, final=options.lr, warmup=warmup, total=total)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = train.sample(options.batch_size - n_sim, rng)
        if n_sim:
            assert sim is not None
            batch = _concat(batch, sim.sample(n_sim, rng))
        trained.train()
        if full_loss is not None:
            loss = full_loss(model, batch)
        else:
            loss = training_loss(model, batch, bootstrap)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, options.grad_clip)
        optimizer.step()
        if full_loss is not None:
            full_loss.update_target(model)
        step += 1
        out_of_time = (
            options.max_minutes is not None and time.perf_counter() - start_time > options.max_minutes * 60
        )
        if step % options.eval_every == 0 or step == total or out_of_time:
            model.eval()
            current = float(heldout_latent_error(model, select, limit=limit).mean())
            if current < best:
                best, best_state, since = current, copy.deepcopy(trained.state_dict()), 0
            else:
                since += 1
            say(
                f"step {step}/{total}: train {float(loss.detach()):.5f}, selection {current:.5f} (best {best:.5f})"
            )
            if since >= options.patience or out_of_time:
                break
    trained.load_state_dict(best_state)
    model.eval()
    after = heldout_latent_error(model, heldout, limit=limit)
    _check_frozen(model, frozen)

    improved = float(after.mean()) < float(before.mean()) * (1.0 - options.min_improvement)
    version: int | None = None
    if improved:
        note = json.dumps(
            {"base": base_version, "before": float(before.mean()), "after": float(after.mean())}
        )
        if full:
            assert out is not None
            description = read_description(folder)
            folder = save_checkpoint(
                model,
                out,
                task=description["task"],
                data_hash=description["data_hash"],
                extra={
                    **description.get("extra", {}),
                    "full_finetune_of": f"{model_dir} {version_label(base_version)}",
                },
            )
            version = 0
        else:
            version = publish_dynamics(folder, model, note=note)
        reason = f"held-out latent error {before.mean():.5f} -> {after.mean():.5f}"
    else:
        reason = (
            f"refused: held-out latent error {after.mean():.5f} is not below the current "
            f"{before.mean():.5f}" + (f" by {options.min_improvement:.0%}" if options.min_improvement else "")
        )
    report = FinetuneReport(
        model=str(folder),
        bags=[str(b) for b in bags],
        base_version=base_version,
        version=version,
        published=improved,
        reason=reason,
        latent_before=[float(x) for x in before],
        latent_after=[float(x) for x in after],
        steps=step,
        epochs=step / per_epoch,
        seconds=time.perf_counter() - start_time,
        train_windows=len(train),
        heldout_windows=len(heldout),
        train_episodes=len(train_idx),
        heldout_episodes=len(decide_idx),
        selection_episodes=len(select_idx),
        minutes_of_data=minutes_of_data(episodes),
    )
    write_report(report, folder / REPORTS_DIR)
    say(reason)
    return report


def _check_frozen(model: WorldModel, frozen: dict[str, torch.Tensor]) -> None:
    for key, value in model.state_dict().items():
        if key in frozen and not torch.equal(frozen[key], value):
            raise CheckpointError(f"finetuning changed frozen weight '{key}'; nothing published")


def _sim_sampler(options: FinetuneOptions, model: WorldModel) -> WindowSampler | None:
    if not options.sim_data or options.sim_share <= 0:
        return None
    if not 0 < options.sim_share < 1:
        raise DatasetError(f"--sim-share must be in (0, 1), got {options.sim_share}")
    dataset = ShardDataset(options.sim_data)
    dims = (dataset.dims["proprio"], dataset.dims["action"], dataset.dims["command"])
    if dims != (model.obs_dim, model.act_dim, model.cmd_dim):
        raise DatasetError(f"{options.sim_data}: sizes {dims} do not match the model's")
    return WindowSampler(dataset.load(), model.history, model.horizon)


def write_report(report: FinetuneReport, out_dir: Path) -> None:
    """finetune_vNNNN.json/.png (or finetune_refused_NNN when refused) in `out_dir`, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if report.version is not None:
        stem = f"finetune_{version_label(report.version)}"
    else:
        stem = f"finetune_refused_{len(list(out_dir.glob('finetune_refused_*.json'))):03d}"
    json_path, png_path = out_dir / f"{stem}.json", out_dir / f"{stem}.png"
    report.report_json, report.report_png = str(json_path), str(png_path)
    after_label = version_label(report.version) if report.version is not None else "finetuned (refused)"
    latent_by_horizon_plot(
        {
            f"{version_label(report.base_version)} (before)": report.latent_before,
            f"{after_label} (after)": report.latent_after,
        },
        png_path,
        title=f"dynamics finetuning on {report.minutes_of_data:.1f} min of data",
        ylabel="held-out latent MSE (real data)",
    )
    atomic.write_json(json_path, report.to_dict())


# -- CLI -----------------------------------------------------------------------------------------------------------

CLI_OPTIONS = (
    "sim_data",
    "sim_share",
    "batch_size",
    "lr",
    "warmup_steps",
    "max_epochs",
    "max_steps",
    "max_minutes",
    "val_fraction",
    "eval_every",
    "patience",
    "min_improvement",
    "seed",
    "threads",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        type=Path,
        help="checkpoint folder to start from (not modified unless --in-place)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="working copy that gets the new version (default runs/models/<model>_finetuned_NN)",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="publish into --model itself (e.g. the folder a planner watches)",
    )
    parser.add_argument(
        "--bag", dest="bags", action="append", required=True, type=Path, help="a run bag (repeatable)"
    )
    add_option_arguments(parser, CLI_OPTIONS)


def working_copy(model: Path, out: Path | None) -> Path:
    """A copy of `model` to publish into (`out`, else the next runs/models/<name>_finetuned_NN)."""
    if out is None:
        root = Path("runs") / "models"
        n = 1
        while (root / f"{model.name}_finetuned_{n:02d}").exists():
            n += 1
        out = root / f"{model.name}_finetuned_{n:02d}"
    if out.exists():
        raise ConfigError(
            f"--out {out}: exists already (choose a new folder, or --in-place to update --model)"
        )
    read_description(model)  # a clear error for a folder that is no model, before copying anything
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(model, out, ignore=shutil.ignore_patterns("reports", atomic.TMP_PATTERN))
    return out


def run(args: argparse.Namespace) -> int:
    real_episodes(args.bags)  # a bad bag is refused before a working copy is made
    folder = args.model if args.in_place else working_copy(args.model, args.out)
    if folder != args.model:
        print(f"finetuning a working copy: {folder} (of {args.model}; --in-place updates that folder)")
    report = finetune(
        folder, args.bags, options_from_args(args, CLI_OPTIONS), log=lambda m: print(m, flush=True)
    )
    outcome = (
        f"published {version_label(report.version)}" if report.version is not None else "nothing published"
    )
    print(
        f"{outcome}: {report.reason}; {report.minutes_of_data:.1f} min of data, {report.steps} steps "
        f"({report.epochs:.1f} epochs) in {report.seconds:.0f} s; report {report.report_json}"
    )
    return 0
