"""`simdist ensemble`: turn a world model into one with K dynamics members, trained on simulation runs.

Member 0 is the model's current dynamics; the others start from fresh weights and learn, each on its own
bootstrap of the data, from runs of the model through the planner on the `sim` profile (or from bags you give),
with the encoder and every head frozen, through the same finetuning and gate as real data. Their disagreement
is then small where the simulation runs went and larger where they did not: what the planner's
`disagreement_weight` penalises. The source model is never modified; the ensemble is a new model folder.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from simdist.cli import add_overrides_argument
from simdist.errors import ConfigError
from simdist.runtime.finetune import finetune
from simdist.runtime.finetune_options import FinetuneOptions


def build_ensemble(
    task: str,
    source: Path,
    out: Path,
    members: int,
    *,
    bags: list[Path] | None = None,
    sim_minutes: float = 5.0,
    options: FinetuneOptions | None = None,
    seed: int = 0,
    overrides: dict | None = None,
    log=print,
) -> Path:
    """Write the ensemble model to `out` (see the module doc); returns `out`."""
    from simdist.model.checkpoint import with_dynamics_members
    from simdist.runtime.deploy import run_deploy
    from simdist.sim.config import load_task

    if members < 2:
        raise ConfigError(f"--members must be at least 2 for an ensemble, got {members}")
    cfg = load_task(task, overrides)
    model = with_dynamics_members(source, out, members, seed=seed)
    if not bags:
        ticks = int(round(sim_minutes * 60 * cfg.control_hz))
        log(f"collecting {sim_minutes:g} min on sim with {source} ({ticks} ticks, lockstep)")
        result = run_deploy(
            task, "sim:sim", source, ticks=ticks, bag_dir=out / "sim_bags", seed=seed, overrides=overrides
        )
        assert result.bag is not None
        bags = [result.bag]
    options = options or FinetuneOptions(seed=seed, trainable="new_members")
    report = finetune(model, bags, options, log=log)
    if not report.published:
        raise ConfigError(f"the ensemble's members did not train: {report.reason}")
    log(f"ensemble of {members} in {model}: {report.reason}")
    return model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument("--model", type=Path, default=None, help="source world model (default models/<task>)")
    parser.add_argument("--out", type=Path, required=True, help="new model folder for the ensemble")
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--bag", dest="bags", action="append", type=Path, default=None, help="train on these")
    parser.add_argument("--sim-minutes", type=float, default=5.0, help="else collect this much on sim")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=3000,
        help="training steps (a count, so the result does not depend on load)",
    )
    parser.add_argument("--max-minutes", type=float, default=0.0, help="training wall-clock budget (0: none)")
    parser.add_argument("--lr", type=float, default=1e-3, help="fresh members learn from scratch")
    parser.add_argument("--seed", type=int, default=0)
    add_overrides_argument(parser)


def run(args: argparse.Namespace) -> int:
    from simdist.config import parse_overrides
    from simdist.runtime.deploy import resolve_model

    options = dataclasses.replace(
        FinetuneOptions(),
        lr=args.lr,
        warmup_steps=200,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes or None,
        seed=args.seed,
        threads=1,
        trainable="new_members",
    )
    build_ensemble(
        args.task,
        resolve_model(args.task, args.model),
        args.out,
        args.members,
        bags=args.bags,
        sim_minutes=args.sim_minutes,
        options=options,
        seed=args.seed,
        overrides=parse_overrides(args.overrides),
    )
    return 0
