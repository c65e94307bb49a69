"""`simdist rollback --model DIR [--to vNNNN]`: point a world model's `dynamics/current` back at an earlier version
after validating it (it loads, and predicts finite latents from a neutral context); a running planner swaps it in
at its next tick boundary (its model store watches the pointer). Through ROS, `ros2 run simdist_finetune rollback`
does the same and waits for the planner's confirmation."""

from __future__ import annotations

import argparse
from pathlib import Path

from simdist.errors import ConfigError
from simdist.model import checkpoint
from simdist.runtime.store import ModelStore, version_label


def parse_version(text: str | None) -> int | None:
    """`v0003`, `3` or None; ConfigError for anything else."""
    if text is None:
        return None
    try:
        return checkpoint.parse_version(text)
    except ValueError:
        raise ConfigError(f"--to {text!r}: expected a version like v0003") from None


def rollback_model(model: Path, to: int | None) -> tuple[int, int]:
    """(from, to) versions; raises CheckpointError (nothing changed) when the target is missing or invalid."""
    before = checkpoint.current_version(model)
    store = ModelStore(model)
    return before, store.rollback(to)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, required=True, help="world-model folder")
    parser.add_argument(
        "--to", default=None, help="version (v0003); default: the newest older than the current"
    )


def run(args: argparse.Namespace) -> int:
    before, after = rollback_model(args.model, parse_version(args.to))
    print(f"{args.model}: dynamics/current {version_label(before)} -> {version_label(after)} (validated)")
    return 0
