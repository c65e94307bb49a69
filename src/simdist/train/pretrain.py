"""World-model pretraining on a dataset folder; `torchrun --nproc_per_node=N -m simdist.train.pretrain ...` runs DDP.

Under torchrun (WORLD_SIZE > 1) the process group uses gloo on CPU and nccl on CUDA; rank 0 alone writes the
checkpoint, the progress bar and the TensorBoard logs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from simdist.cli import add_overrides_argument
from simdist.config import parse_overrides
from simdist.data.dataset import ShardDataset
from simdist.data.windows import WindowSampler, split_episodes
from simdist.errors import ConfigError, DatasetError, SimdistError
from simdist.model.checkpoint import CONFIG_NAME, read_description
from simdist.model.world_model import WorldModel
from simdist.train.config import load_setup
from simdist.train.trainer import Trainer, release_process_group, run_training


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task", required=True, help="task the dataset was generated for (checked against it)"
    )
    parser.add_argument("--data", required=True, type=Path, help="dataset folder (manifest.json + shards)")
    parser.add_argument(
        "--preset", default="default", help="config/train/<preset>.yaml and config/model/<preset>.yaml"
    )
    parser.add_argument("--out", required=True, type=Path, help="checkpoint folder to write")
    parser.add_argument(
        "--device", default="cpu", help="cpu, cuda or cuda:N (under torchrun: cuda:LOCAL_RANK)"
    )
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    parser.add_argument(
        "--partial",
        action="store_true",
        help="train on a corpus whose generation has not finished (its completed shards)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (logs still go to TensorBoard)"
    )
    add_overrides_argument(parser, help="e.g. train.steps=100")


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The device the user asked for; CUDA without a GPU is a one-line ConfigError, never a silent fallback."""
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {name}: CUDA is not available on this machine (use --device cpu)")
        return torch.device(name if ":" in name else f"cuda:{local_rank}")
    raise ConfigError(f"--device {name}: expected cpu, cuda or cuda:N")


def pretrain(args: argparse.Namespace) -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = resolve_device(args.device, int(os.environ.get("LOCAL_RANK", "0")))
    setup = load_setup(args.preset, parse_overrides(args.overrides))
    dataset = ShardDataset(args.data)
    if dataset.task != args.task:
        raise DatasetError(f"{args.data}: generated for task '{dataset.task}', not '{args.task}'")
    if not dataset.manifest.get("complete") and not args.partial:
        raise DatasetError(
            f"{args.data}: its generation has not finished ({len(dataset.manifest['shards'])} shards): resume it "
            "with `simdist data generate --out` on the same folder, or pass --partial to train on what is there"
        )
    out = Path(args.out)
    if not args.resume and (out / CONFIG_NAME).exists():
        raise ConfigError(f"{out} already holds a checkpoint: pass --resume or choose another --out")
    if args.resume and (out / CONFIG_NAME).exists():
        saved, this = read_description(out).get("data_hash"), dataset.data_hash()
        if saved != this:
            raise DatasetError(
                f"{args.data}: not the corpus the run in {out} trained on (its data hash {saved}, this one "
                f"{this}): resume with the same --data"
            )
    if world > 1:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return _train(args, setup, dataset, out, device, rank, world)
    finally:
        if world > 1:
            release_process_group()


def _train(args, setup, dataset, out, device, rank, world) -> int:  # type: ignore[no-untyped-def]
    cfg = setup.train
    source = dataset.load(max_bytes=cfg.memory_mb << 20)
    train_eps, val_eps = split_episodes(source, cfg.val_fraction)
    history, horizon = setup.model.history, setup.model.horizon
    labels = cfg.behaviour_cloning == "expert"
    sampler = WindowSampler(source, history, horizon, train_eps, expert_labels=labels)
    val_sampler = (
        WindowSampler(source, history, horizon, val_eps, expert_labels=labels) if len(val_eps) else None
    )
    if setup.model.image is not None and not dataset.has_image:
        raise ConfigError("model.image is set but the dataset has no images")
    torch.manual_seed(cfg.seed)
    dims = {
        "obs_dim": dataset.dims["proprio"],
        "act_dim": dataset.dims["action"],
        "cmd_dim": dataset.dims["command"],
    }
    model = WorldModel.build(dims, setup.model, dataset.normalizer)
    trainer = Trainer(model, setup, sampler, device, rank=rank, world=world)
    if dataset.randomisation is not None:
        trainer.corpus = {"randomisation": dataset.randomisation}
    if args.resume:
        trainer.resume(out)
    main = rank == 0
    if main:
        out.mkdir(parents=True, exist_ok=True)
    writer = _tensorboard(out) if main else None

    def log(step: int, values: dict[str, float]) -> None:
        if writer is not None:
            for key, value in values.items():
                writer.add_scalar(key, value, step)

    progress = None
    if main and not args.no_progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(
            TextColumn("pretrain"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[loss]}"),
        )
        bar = progress.add_task("train", total=cfg.steps, completed=trainer.step, loss="")
        progress.start()

    def on_step(step: int) -> None:
        if progress is not None:
            progress.update(bar, completed=step)

    def log_and_show(step: int, values: dict[str, float]) -> None:
        log(step, values)
        if progress is not None and "train/total" in values:
            progress.update(bar, loss=f"loss {values['train/total']:.4f}")

    try:
        last = run_training(
            trainer, out_dir=out, task=dataset.task, data_hash=dataset.data_hash(), val_sampler=val_sampler,
            log=log_and_show, on_step=on_step,
        )  # fmt: skip
    finally:
        if progress is not None:
            progress.stop()
        if writer is not None:
            writer.close()
    if main:
        terms = ", ".join(
            f"{k} {last[k]:.4f}" for k in ("dynamics", "reward", "value", "action") if k in last
        )
        print(f"pretrained {trainer.step} steps -> {out} ({terms})")
    return 0


def _tensorboard(out: Path):  # type: ignore[no-untyped-def]
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tb"))


def main(argv: Sequence[str] | None = None) -> int:
    from simdist.cli import OneLineParser

    parser = OneLineParser(prog="simdist.train.pretrain", description=__doc__.splitlines()[0])
    add_pretrain_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return pretrain(args)
    except SimdistError as exc:
        sys.stderr.write(f"simdist: error: {exc}\n")
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
