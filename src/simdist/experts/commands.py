"""`simdist expert train|eval`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from simdist.cli import add_task_arguments
from simdist.config import parse_overrides
from simdist.experts.config import load_expert_config
from simdist.sim.config import load_task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    train = sub.add_parser("train", help="train a task's expert and save checkpoints, critic and manifest")
    add_task_arguments(train, profile=False)
    train.add_argument("--preset", default="default", help="config/expert/<preset>.yaml: tiny, default, gpu")
    train.add_argument("--out", default=None, help="expert folder (default runs/experts/<task>)")
    train.add_argument(
        "--expert-set",
        dest="expert_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset value",
    )
    ev = sub.add_parser("eval", help="evaluate an expert's final policy")
    add_task_arguments(ev)
    ev.add_argument("--expert", required=True, help="expert folder")
    ev.add_argument("--episodes", type=int, default=100)


def run(args: argparse.Namespace) -> int:
    cfg = load_task(args.task, parse_overrides(args.overrides))
    if args.action == "train":
        from simdist.experts.train import train_expert

        ecfg = load_expert_config(args.preset, parse_overrides(args.expert_overrides))
        out = Path(args.out or f"runs/experts/{args.task}")
        with contextlib.redirect_stdout(sys.stderr):  # rsl-rl's per-iteration report is progress, not output
            manifest = train_expert(cfg, ecfg, args.preset, out, log_dir=out / "tensorboard")
        print(
            json.dumps(
                {
                    "out": str(out),
                    "iterations": manifest["iterations"],
                    "train_minutes": round(manifest["train_minutes"], 2),
                    "evaluation": manifest["evaluation"],
                },
                indent=2,
            )
        )
        return 0
    from simdist.experts.evaluate import evaluate
    from simdist.experts.policy import Expert

    expert = Expert(args.expert)
    print(json.dumps(evaluate(expert.final.act, cfg, args.profile, args.episodes), indent=2))
    return 0
