"""Dynamics-only finetuning on deployment bags, with a validation gate, and the `simdist finetune` verb.

Only `model.dynamics` trains; encoder, history, reward, value, policy and normaliser stay bit-identical (checked
before anything is published). Loss: latent consistency against the frozen encoder,
mean_k || z_hat(t+k) - E(o(t+k)) ||^2 over the real future steps, as in pretraining; with
`dynamics_reward_weight` / `dynamics_value_weight` > 0 (outside the paper's recipe) also the rewards the robot
measured and the returns it earned, read by the frozen reward and value heads from the predicted latents, and
selection and the gate compare that sum. Two disjoint sets of held-out
real episodes: one selects the best step (early stopping), the other decides the gate, so a version is refused
unless its latent error (with a reward weight: that sum) is lower than the current one's on episodes that played no
part in choosing it.
Bags are read (and refused) before anything is written. Nothing here imports the simulator.

`trainable="all"` is the full-finetuning (forgetting) baseline of `simdist experiment`, made as strong as is
reasonable: every parameter trains on the real windows, latent targets come from an EMA of the encoder, and the
starting model's reward, value and policy outputs anchor the heads; it writes a model of its own (never the
weights that the source's dynamics versions share), so only a freshly loaded model sees it (no hot swap).
`trainable="dynamics_reward"` (outside the paper's recipe) trains the dynamics on the paper's loss and the reward
head on the rewards the robot measured, from the predicted latents (`"dynamics_critic"`: the value head too, on
the returns it earned); a model of its own too.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simdist import atomic
from simdist.data.dataset import ShardDataset
from simdist.data.windows import WindowBatch, WindowSampler
from simdist.errors import BagError, CheckpointError, ConfigError, DatasetError
from simdist.model.checkpoint import (
    PRETRAINING,
    current_version,
    load_checkpoint,
    pretrained_version,
    publish_dynamics,
    read_description,
    save_checkpoint,
    version_label,
)
from simdist.model.world_model import Context, WorldModel
from simdist.runtime.finetune_losses import (
    FullFinetuneLoss,
    HeadAnchor,
    measured_errors,
    training_loss,
)
from simdist.runtime.finetune_options import (
    HEADS_BESIDE_DYNAMICS,
    FinetuneOptions,
    add_option_arguments,
    options_from_args,
)
from simdist.runtime.real_data import check_dims, measured_returns, minutes_of_data, real_episodes, split_real
from simdist.sim.config import load_task
from simdist.train.evaluate import heldout_latent_error, latent_by_horizon_plot
from simdist.train.schedule import learning_rate

REPORTS_DIR = "reports"


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
    # what ended training: "steps" (all planned), "patience", "budget" (max_minutes) or "diverged" (a non-finite
    # training loss: the best step before it is what the gate judged)
    stopped_by: str = ""
    train_seconds: float = 0.0  # the training loop's time: what the budget counts
    # what the gate compared where it is not the latent error alone (dynamics_reward_weight > 0): its name, and its
    # value for the current and the finetuned dynamics on the gate's episodes
    gate_measure: str = "held-out latent error"
    gate_before: float | None = None
    gate_after: float | None = None
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


def _concat(a: WindowBatch, b: WindowBatch) -> WindowBatch:
    fields = {}
    for f in dataclasses.fields(WindowBatch):
        x, y = getattr(a, f.name), getattr(b, f.name)
        fields[f.name] = None if x is None or y is None else torch.cat([x, y])
    return WindowBatch(**fields)


def _frozen_state(model: WorldModel, trained_prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith(trained_prefixes)
    }


# -- finetuning ----------------------------------------------------------------------------------------------------


def _trained_part(model: WorldModel, options: FinetuneOptions) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """What `options.trainable` trains, and the state-dict prefixes of its weights (every other weight must stay
    bit-identical)."""
    if options.trainable == "all":
        return model, ("",)
    if options.trainable == "new_members":
        return model.dynamics.extra, ("dynamics.extra.",)
    if options.trainable == "dynamics" or options.trained_heads:
        parts = ("dynamics", *options.trained_heads)
        modules = [getattr(model, name) for name in parts]
        trained = modules[0] if len(modules) == 1 else torch.nn.ModuleList(modules)
        return trained, tuple(f"{name}." for name in parts)
    kinds = ("dynamics", *HEADS_BESIDE_DYNAMICS, "all", "new_members")
    raise ConfigError(f"trainable must be one of {', '.join(kinds)}, got '{options.trainable}'")


def resolve_start_from(options: FinetuneOptions, model_dir: Path) -> str:
    """Where this finetune starts, "current" or "pretrained": the options' choice, or with "task" the model's task's
    measured one (full finetuning and ensemble members always continue from what they have)."""
    if options.start_from != "task":
        return options.start_from
    if options.trainable != "dynamics":
        return "current"
    return load_task(read_description(model_dir)["task"]).finetune_start_from


def finetune(
    model_dir: str | Path,
    bags: Sequence[str | Path],
    options: FinetuneOptions | None = None,
    *,
    out: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> FinetuneReport:
    """Finetune the current dynamics of `model_dir` on `bags`; publish the result if it passes the gate.

    Full finetuning (`trainable="all"`) and heads trained beside the dynamics (`"dynamics_reward"`,
    `"dynamics_critic"`) change weights that every dynamics version of `model_dir` shares, so they never publish
    there: they write a model of their own to `out` (required, must not exist), and the report's `model` names it.

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
    if options.own_model and (out is None or Path(out).exists()):
        raise ConfigError(
            f"trainable '{options.trainable}' writes a model of its own: give a new folder as out"
            + ("" if out is None else f" ({out} exists)")
        )
    episodes = real_episodes(bags)  # every refusal happens here, before anything is written
    base_version = current_version(folder)
    model = load_checkpoint(folder, version=base_version).eval()
    check_dims(episodes, model, bags)
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    sim = _sim_sampler(options, model)
    dynamics_only = options.trainable != "all"
    reward_weight = options.dynamics_reward_weight if dynamics_only else 0.0
    value_weight = options.dynamics_value_weight if dynamics_only else 0.0
    # heads trained beside the dynamics: their errors on what the robot measured join selection and the gate
    head_weights = {name: options.reward_weight for name in options.trained_heads}
    if options.trainable == "all" or reward_weight > 0 or value_weight > 0 or head_weights:
        measured = float(np.isfinite(np.concatenate([e["reward"] for e in episodes])).mean())
        if options.trainable == "all":
            say(
                f"the robot's reward is in the bags for {measured:.1%} of the steps "
                f"(the reward head trains on those; elsewhere it is anchored)"
            )
        elif measured == 0:
            raise BagError(
                f"{Path(bags[0])}: no reward measured (/simdist/reward), which "
                + ("training the heads" if head_weights else "a dynamics reward or value weight")
                + " needs"
            )
        else:
            say(
                f"the robot's reward is in the bags for {measured:.1%} of the steps "
                + (
                    f"(training the {' and '.join(head_weights)} head{'s' * (len(head_weights) > 1)})"
                    if head_weights
                    else "(read by the frozen heads)"
                )
            )
    # the return each step's state earned: what the value head reads
    if value_weight > 0 or "value" in head_weights:
        for e in episodes:
            e["value"] = measured_returns(e, options.discount)

    # the windows are cut only now, so that they carry the returns above
    source, train_idx, select_idx, decide_idx = split_real(episodes, options.val_fraction)
    train = WindowSampler(source, model.history, model.horizon, train_idx)
    select = WindowSampler(source, model.history, model.horizon, select_idx)
    heldout = WindowSampler(source, model.history, model.horizon, decide_idx)
    if len(train) == 0 or len(select) == 0 or len(heldout) == 0:
        raise BagError(f"{Path(bags[0])}: too few steps for training and held-out windows")

    if options.trainable == "new_members":  # an ensemble's new members learn from scratch, not from member 0
        model.dynamics.fresh_members(options.seed)
    trained, trained_prefixes = _trained_part(model, options)
    full = options.trainable == "all"
    own = options.own_model
    frozen = _frozen_state(model, trained_prefixes)
    if not list(trained.parameters()):
        raise ConfigError("trainable 'new_members' needs a model with more than one dynamics member")
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(trained.parameters())
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=options.lr)

    limit = options.eval_windows
    # heads beside the dynamics exclude the dynamics' own head weights (FinetuneOptions refuses both)
    weights = head_weights or {"reward": reward_weight, "value": value_weight}
    before, before_objective = _heldout(model, heldout, limit, weights)
    say(
        f"held-out latent error of {version_label(base_version)}: {before.mean():.5f} ({len(heldout)} windows)"
        + (f", objective {before_objective:.5f}" if any(weights.values()) else "")
    )
    start_from = resolve_start_from(options, folder)
    pretrained = pretrained_version(folder)  # v0000, or an ensemble's version with its members trained
    if start_from == "pretrained" and base_version != pretrained:
        # afresh from the pretrained dynamics; `before` above stays the version in force, which the gate compares with
        model.dynamics.load_state_dict(load_checkpoint(folder, version=pretrained).dynamics.state_dict())
        say(f"training from the pretrained dynamics ({version_label(pretrained)})")
    best = _heldout(model, select, limit, weights)[1]
    best_state, since = copy.deepcopy(trained.state_dict()), 0
    per_epoch = math.ceil(len(train) / options.batch_size)
    total = options.max_epochs * per_epoch
    if options.max_steps is not None:
        total = min(total, options.max_steps)
    warmup = min(options.warmup_steps, max(1, total // 4))
    final_lr = options.lr * options.final_lr_fraction
    n_sim = round(options.batch_size * options.sim_share) if sim is not None else 0
    rng = np.random.default_rng(options.seed)
    bootstrap = torch.Generator().manual_seed(options.seed)
    full_loss = FullFinetuneLoss(model, options) if full else None
    anchor = (
        HeadAnchor(model, options.trained_heads, options.head_anchor_std, options.seed, options.anchor_weight)
        if options.head_anchor_std > 0
        else None
    )
    step, stopped_by = 0, "steps"
    # The budget counts the optimiser's time only, and is checked at each evaluation: a round trains at least
    # `eval_every` steps however long reading the bags took or however loaded the machine is.
    train_start = time.perf_counter()
    while step < total:
        lr = learning_rate(step, peak=options.lr, final=final_lr, warmup=warmup, total=total)
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
            loss = training_loss(model, batch, bootstrap, reward_weight, value_weight, head_weights, anchor)
        if not torch.isfinite(loss):  # diverged: the gate judges the best step before it, never a NaN model
            say(f"step {step + 1}/{total}: training loss {float(loss.detach())}; training stops here")
            stopped_by = "diverged"
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, options.grad_clip)
        optimizer.step()
        if full_loss is not None:
            full_loss.update_target(model)
        step += 1
        if step % options.eval_every == 0 or step == total:
            out_of_time = (
                options.max_minutes is not None
                and time.perf_counter() - train_start > options.max_minutes * 60
            )
            model.eval()
            current = _heldout(model, select, limit, weights)[1]
            if current < best:
                best, best_state, since = current, copy.deepcopy(trained.state_dict()), 0
            else:
                since += 1
            say(
                f"step {step}/{total}: train {float(loss.detach()):.5f}, selection {current:.5f} (best {best:.5f})"
            )
            if since >= options.patience or (out_of_time and step < total):
                stopped_by = "patience" if since >= options.patience else "budget"
                break
    train_seconds = time.perf_counter() - train_start
    trained.load_state_dict(best_state)
    model.eval()
    after, after_objective = _heldout(model, heldout, limit, weights)
    _check_frozen(model, frozen)

    improved = after_objective < before_objective * (1.0 - options.min_improvement)
    # what the gate compared: the latent error, or with head weights latent + weight x each head's error
    measure = (
        "held-out latent" + "".join(f" + {w:g} x {name}" for name, w in weights.items() if w > 0) + " error"
    )
    version: int | None = None
    if improved:
        note = json.dumps(
            {
                "base": base_version,
                "start": pretrained if start_from == "pretrained" else base_version,
                # an ensemble's members trained (on simulation runs): the model's pretraining, not adaptation
                **({PRETRAINING: True} if options.trainable == "new_members" else {}),
                "before": float(before.mean()),
                "after": float(after.mean()),
            }
        )
        if own:
            assert out is not None
            description = read_description(folder)
            source = f"{model_dir} {version_label(base_version)}"
            folder = save_checkpoint(
                model,
                out,
                task=description["task"],
                data_hash=description["data_hash"],
                # a model of its own whose v0000 already learnt from real data (what the runtime's `adapted` reads)
                extra={
                    **description.get("extra", {}),
                    "finetune_of": source,
                    "finetune_trainable": options.trainable,
                },
            )
            version = 0
        else:
            version = publish_dynamics(folder, model, note=note)
        reason = f"{measure} {before_objective:.5f} -> {after_objective:.5f}"
    else:
        reason = (
            f"refused: {measure} {after_objective:.5f} is not below the current "
            f"{before_objective:.5f}"
            + (f" by {options.min_improvement:.0%}" if options.min_improvement else "")
        )
    if any(weights.values()):
        reason += f" (latent error {before.mean():.5f} -> {after.mean():.5f})"
    if stopped_by == "diverged":
        reason += f"; training diverged at step {step + 1} (a non-finite loss: lower the learning rate)"
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
        stopped_by=stopped_by,
        train_seconds=train_seconds,
        gate_measure=measure,
        gate_before=before_objective,
        gate_after=after_objective,
    )
    # a refused finetune of a model of its own leaves `model_dir` as it was: its report goes to `out`, like the
    # model would have
    write_report(report, (Path(out) if own and out is not None else folder) / REPORTS_DIR)
    say(reason)
    return report


def _heldout(
    model: WorldModel, sampler: WindowSampler, limit: int, weights: dict[str, float]
) -> tuple[np.ndarray, float]:
    """(held-out latent error per horizon step, the objective early stopping and the gate compare): the latent
    error's mean, plus for each head ("reward", "value") with a weight above 0 that weight x the frozen head's
    squared error against what the robot measured (normalised units)."""
    sums = {name: [0.0, 0.0] for name, w in weights.items() if w > 0}

    def add_head_errors(batch: WindowBatch, ctx: Context, latents: torch.Tensor) -> None:
        for name, acc in sums.items():
            errors, measured = measured_errors(model, batch, ctx.latent, latents[None], name)
            acc[0] += float((errors[0] * measured).sum())
            acc[1] += float(measured.sum())

    latent = heldout_latent_error(model, sampler, limit=limit, each=add_head_errors if sums else None)
    return latent, float(latent.mean()) + sum(weights[k] * a[0] / max(a[1], 1.0) for k, a in sums.items())


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
    "final_lr_fraction",
    "max_epochs",
    "max_steps",
    "max_minutes",
    "val_fraction",
    "eval_every",
    "patience",
    "min_improvement",
    "seed",
    "threads",
    "trainable",
    "dynamics_reward_weight",
    "dynamics_value_weight",
    "head_anchor_std",
    "start_from",
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
    # copied beside it and renamed into place: an interrupted copy never looks like a model
    partial = out.parent / f".{out.name}.copy-{os.getpid()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(model, partial, ignore=shutil.ignore_patterns("reports", atomic.TMP_PATTERN))
    os.replace(partial, out)
    return out


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args, CLI_OPTIONS)
    own = options.own_model
    if own and (args.in_place or args.out is None):
        raise ConfigError(
            f"--trainable {options.trainable} changes weights every dynamics version of --model shares: give --out "
            "NEW_FOLDER (a model of its own), never --in-place"
        )
    real_episodes(args.bags)  # a bad bag is refused before a working copy is made
    if own:
        folder = args.model  # read only: finetune writes the new model to --out
    else:
        folder = args.model if args.in_place else working_copy(args.model, args.out)
        if folder != args.model:
            print(f"finetuning a working copy: {folder} (of {args.model}; --in-place updates that folder)")
    try:
        report = finetune(
            folder, args.bags, options, out=args.out if own else None, log=lambda m: print(m, flush=True)
        )
    except BaseException:
        if folder != args.model and not own:  # refused or interrupted: no working copy left for nothing
            shutil.rmtree(folder, ignore_errors=True)
        raise
    if report.version is None:
        outcome = "nothing published"
    elif own:
        kind = "fully finetuned" if options.trainable == "all" else f"finetuned ({options.trainable})"
        outcome = f"wrote the {kind} model {report.model}"
    else:
        outcome = f"published {version_label(report.version)}"
    print(
        f"{outcome}: {report.reason}; {report.minutes_of_data:.1f} min of data, {report.steps} steps "
        f"({report.epochs:.1f} epochs) in {report.seconds:.0f} s; report {report.report_json}"
    )
    return 0
