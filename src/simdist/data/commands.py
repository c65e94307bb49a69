"""`simdist data generate`: the pretraining corpus of a task."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simdist.cli import add_task_arguments
from simdist.config import parse_overrides
from simdist.sim.config import load_task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    gen = sub.add_parser(
        "generate", help="generate (or resume) a dataset with the expert mixture and noise bursts"
    )
    add_task_arguments(gen, profile=False)
    gen.add_argument("--preset", default="default", help="config/data/<preset>.yaml: tiny, default, gpu")
    gen.add_argument("--out", required=True, help="dataset folder (resumes if it holds completed shards)")
    gen.add_argument("--expert", default=None, help="expert folder (default runs/experts/<task>)")
    gen.add_argument(
        "--data-set",
        dest="data_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset value",
    )


def run(args: argparse.Namespace) -> int:
    from simdist.data.generate import generate, load_data_config

    cfg = load_task(args.task, parse_overrides(args.overrides))
    dcfg = load_data_config(args.preset, parse_overrides(args.data_overrides))
    expert = Path(args.expert or f"runs/experts/{args.task}")
    print(json.dumps(generate(cfg, dcfg, expert, Path(args.out), args.preset)))
    return 0
