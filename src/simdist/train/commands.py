"""`simdist train pretrain|eval`: pretrain the world model on a dataset, or evaluate a checkpoint on held-out data."""

from __future__ import annotations

import argparse
from pathlib import Path

from simdist.train.pretrain import add_pretrain_arguments, pretrain, resolve_device


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="train_verb", metavar="<pretrain|eval>", parser_class=type(parser))
    sub.required = True
    p = sub.add_parser("pretrain", help="pretrain the world model (torchrun for several processes)")
    add_pretrain_arguments(p)
    e = sub.add_parser(
        "eval", help="prediction error per horizon step, reward/value R^2, behaviour cloning error"
    )
    e.add_argument("--model", required=True, type=Path, help="checkpoint folder")
    e.add_argument("--data", required=True, type=Path, help="dataset folder")
    e.add_argument("--out", type=Path, default=None, help="folder for metrics.json and latent_error.png")
    e.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    e.add_argument("--windows", type=int, default=4096, help="at most this many held-out windows")
    e.add_argument("--batch-size", type=int, default=256)
    e.add_argument(
        "--val-fraction", type=float, default=None, help="default: the fraction the model was trained with"
    )


def run(args: argparse.Namespace) -> int:
    if args.train_verb == "pretrain":
        return pretrain(args)
    return evaluate_command(args)


def evaluate_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from simdist.data.dataset import ShardDataset
    from simdist.data.windows import WindowSampler, split_episodes
    from simdist.errors import DatasetError
    from simdist.model.checkpoint import load_checkpoint, read_description
    from simdist.train.evaluate import evaluate, result_table, save_report

    description = read_description(args.model)
    model = load_checkpoint(args.model, device=resolve_device(args.device))
    dataset = ShardDataset(args.data)
    dims = {
        "obs_dim": dataset.dims["proprio"],
        "act_dim": dataset.dims["action"],
        "cmd_dim": dataset.dims["command"],
    }
    if dims != model.dims:
        raise DatasetError(f"{args.data}: sizes {dims} do not match the model's {model.dims}")
    fraction = args.val_fraction
    if fraction is None:
        fraction = float(description.get("extra", {}).get("train", {}).get("val_fraction", 0.05))
    _, held = split_episodes(dataset, fraction)
    if len(held) == 0:
        raise DatasetError(f"{args.data}: no held-out episodes at fraction {fraction}")
    sampler = WindowSampler(dataset.load(), model.history, model.horizon, held)
    result = evaluate(model, sampler, batch_size=args.batch_size, limit=args.windows)
    title = f"{description['task']}: {args.model}"
    Console().print(result_table(result, title))
    if description.get("data_hash") != dataset.data_hash():
        Console().print("[yellow]note: the model was pretrained on a different dataset[/yellow]")
    out = args.out or Path(args.model) / "eval"
    metrics, png = save_report(result, out, title=title)
    print(f"wrote {metrics} and {png}")
    return 0
