"""`simdist experiment`: SimDist against baselines on a sim:<profile> "real robot", the paper's Figure 4 emulated.

Per seed, every adapting method gets the same real-data budget in environment steps at each point
(minutes x 60 x control_hz): `simdist` collects with its current model through the planner, finetunes the dynamics
on all its data so far, publishes (gate) and continues; `full_finetune` trains every world-model weight on the same
loss and simdist's very bags; `oracle` is the simdist loop from a model pretrained with the profile inside the
randomisation; `rl_finetune` runs PPO from the expert on the profile; `zero_shot` is evaluated once. Every
evaluation uses the task's protocol (Go2: 3 speeds x 5 episodes, forward progress; peg: 20 episodes, success) with
the same evaluation seed for all methods of a seed: the world-model methods run the very same episodes (paired);
`rl_finetune`'s actor runs one episode per environment, the same distribution but other draws (compare unpaired).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simdist import robots
from simdist.cli import add_overrides_argument
from simdist.errors import ConfigError
from simdist.experiment import prediction
from simdist.experiment.config import (
    EVAL_SEED,
    HELDOUT_SEED,
    ExperimentConfig,
    budget_steps,
    load_experiment_config,
    parse_points,
)
from simdist.experiment.methods import Track, copy_model, oracle_folder, rl_method, world_model_methods
from simdist.experiment.report import ExperimentResult, PointResult, write_outputs
from simdist.sim.config import TaskConfig, load_task


def episode_stats(ended: list[dict[str, Any]], metric_key: str) -> dict[str, Any]:
    """Mean, standard error, falls and per-episode values of evaluated episodes (the protocol's metric key)."""
    from simdist.runtime.adapt import count_falls, episode_returns

    per = [float(e["metrics"][metric_key]) for e in ended]
    returns = episode_returns(ended)
    return {
        "value": float(np.mean(per)) if per else float("nan"),
        "stderr": float(np.std(per, ddof=1) / np.sqrt(len(per))) if len(per) > 1 else 0.0,
        "falls": count_falls(ended) or 0,
        "episodes": len(per),
        "per_episode": per,
        # the task reward summed over each episode (a simulated robot's), where the episodes carry it
        **({"per_episode_return": returns} if returns is not None else {}),
    }


@dataclass
class Run:
    task: str
    profile: str
    cfg: TaskConfig
    ecfg: ExperimentConfig
    overrides: dict[str, Any]
    out: Path
    expert: Path
    log: Callable[[str], None]
    result: ExperimentResult
    heldout: Any = None  # prediction.Rollouts

    @contextlib.contextmanager
    def timed(self, method: str, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            costs = self.result.costs.setdefault(method, {})
            costs[phase] = costs.get(phase, 0.0) + time.perf_counter() - start

    def record(self, row: PointResult, message: str) -> None:
        """Add an evaluated point and rewrite the run folder's outputs, so that a run stopped after hours still
        leaves every point measured so far (the report says it is partial until the end)."""
        self.result.rows.append(row)
        self.log(message)
        write_outputs(self.result, self.out, partial=True)

    def evaluate_model(self, folder: Path, seed: int) -> tuple[float, list[float]]:
        """(the metric, its per-episode values) on the evaluation set of `seed`."""
        from simdist.runtime.adapt import evaluate_on_robot
        from simdist.runtime.store import ModelStore

        key = robots.get(self.cfg.robot).evaluation(self.cfg, self.ecfg.eval_episodes).metric_key
        _, value, ended = evaluate_on_robot(
            self.cfg,
            self.profile,
            ModelStore(folder),
            overrides=self.overrides,
            planner=self.ecfg.planner,
            planner_overrides=self.ecfg.planner_overrides,
            episodes=self.ecfg.eval_episodes,
            seed=EVAL_SEED + seed,
        )
        return value, [float(e["metrics"][key]) for e in ended]

    def heldout_error(self, folder: Path) -> float:
        from simdist.experiment.prediction import latent_error_by_horizon
        from simdist.model.checkpoint import load_checkpoint

        errors = latent_error_by_horizon(
            load_checkpoint(folder), self.heldout, windows=self.ecfg.prediction.windows
        )
        return float(np.mean(errors))


def run_experiment(
    task: str,
    profile: str,
    *,
    model: Path,
    expert: Path,
    out: Path,
    preset: str = "default",
    config: ExperimentConfig | None = None,
    overrides: Mapping[str, Any] | None = None,
    oracle_model: Path | None = None,
    command: str = "",
    log: Callable[[str], None] | None = None,
) -> ExperimentResult:
    """Run every configured method over the seeds and points; write the report, plots and results.json to `out`."""
    from simdist.experiment.prediction import expert_rollouts

    ecfg = config or load_experiment_config(preset)
    overrides = dict(overrides or {})
    cfg = load_task(task, overrides)
    cfg.profile(profile)
    if oracle_model is not None:  # before any work: its corpus's randomisation must hold the profile
        from simdist.experiment.oracle import check_oracle

        check_oracle(oracle_model, cfg, profile, log or print)
    evaluation = robots.get(cfg.robot).evaluation(cfg, ecfg.eval_episodes)
    metric, description = evaluation.metric, evaluation.description
    if ecfg.threads > 0:
        torch.set_num_threads(ecfg.threads)
    out.mkdir(parents=True, exist_ok=False)
    seeds = list(range(ecfg.first_seed, ecfg.first_seed + ecfg.seeds))
    result = ExperimentResult(
        task=task,
        profile=profile,
        preset=preset,
        points=list(ecfg.points),
        budget=budget_steps(ecfg.points, cfg.control_hz),
        seeds=seeds,
        methods=list(ecfg.methods),
        metric=metric,
    )
    result.settings = {
        "command": command,
        "control_hz": cfg.control_hz,
        "protocol": description,
        "model": str(model),
        "expert": str(expert),
        "task_overrides": overrides,
        "profile_params": cfg.profile(profile),
        "experiment": dataclasses.asdict(ecfg),
        "evaluation_seed": f"{EVAL_SEED} + seed",
    }
    run = Run(task, profile, cfg, ecfg, overrides, out, expert, log or (lambda m: None), result)
    p = ecfg.prediction
    with run.timed("prediction view", "held-out rollouts"):
        run.heldout = expert_rollouts(
            cfg, profile, expert, num_envs=p.heldout_envs, seconds=p.heldout_seconds, seed=HELDOUT_SEED
        )
    oracle = oracle_folder(run, oracle_model) if "oracle" in ecfg.methods else None
    if "rl_finetune" in ecfg.methods:
        from simdist.experts.policy import actor_file, read_manifest

        manifest = read_manifest(expert)
        if actor_file(manifest) is None:
            result.skipped["rl_finetune"] = (
                f"the {task} expert is {manifest['kind']} with no actor network: there is no policy for PPO to "
                "resume (an expert trained before actors were distilled; train it again)"
            )
    from simdist.model.checkpoint import version_label

    for seed in seeds:
        root = out / f"seed_{seed}"
        zero = None
        if {"zero_shot", "simdist", "full_finetune"} & set(ecfg.methods):
            with run.timed("zero_shot", "evaluate"):
                zero = run.evaluate_model(model, seed)
            if "zero_shot" in ecfg.methods:
                with run.timed("prediction view", "latent error"):
                    latent = run.heldout_error(model)
                for minutes in result.points:
                    result.rows.append(
                        PointResult(
                            "zero_shot",
                            seed,
                            minutes,
                            0,
                            metric,
                            zero[0],
                            zero[1],
                            latent,
                            version=version_label(0),
                        )
                    )
            run.log(f"seed {seed}, zero_shot: {zero[0]:.3f}")
            write_outputs(result, out, partial=True)
        lead_methods = [m for m in ("simdist", "full_finetune") if m in ecfg.methods]
        if lead_methods:
            tracks = [
                Track(m, copy_model(model, root / m / "model"), "dynamics" if m == "simdist" else "all")
                for m in lead_methods
            ]
            # full finetuning trains on simdist's bags; alone, it collects its own with its current model
            world_model_methods(run, seed, tracks[0], tracks[1:], zero)
        if oracle is not None:
            track = Track("oracle", copy_model(oracle, root / "oracle" / "model"), "dynamics")
            world_model_methods(run, seed, track, [], None)
        if "rl_finetune" in ecfg.methods and "rl_finetune" not in result.skipped:
            rl_method(run, seed)
    prediction.write_view(run, model)
    write_outputs(result, out)
    return result


# -- CLI -----------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument(
        "--profile", required=True, help="the real robot: sim:<profile> (e.g. ptfe, foam, real)"
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default: the preset's)")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=None,
        help="number of the first seed (default 0): seeds run in parallel",
    )
    parser.add_argument("--preset", default="default", help="config/experiment/<preset>.yaml: tiny, default")
    parser.add_argument("--points", default=None, help="minutes of real data, e.g. 0,5,10,15,30")
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated subset of zero_shot,simdist,full_finetune,rl_finetune,oracle",
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="pretrained checkpoint (default: models/<task>/)"
    )
    parser.add_argument(
        "--expert", type=Path, default=None, help="expert folder (default: runs/experts/<task>)"
    )
    parser.add_argument(
        "--oracle-model", type=Path, default=None, help="reuse a pretrained oracle checkpoint"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run folder (default: runs/experiments/<task>_<profile>_NN)"
    )
    parser.add_argument(
        "--experiment-set",
        dest="experiment_overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset value, e.g. finetune.max_steps=2000",
    )
    add_overrides_argument(parser)


def _next_out(root: Path, stem: str) -> Path:
    n = 1
    while (root / f"{stem}_{n:02d}").exists():
        n += 1
    return root / f"{stem}_{n:02d}"


def _command(args: argparse.Namespace, ecfg: ExperimentConfig, model: Path, expert: Path, out: Path) -> str:
    """The command line that reproduces this run (defaults made explicit)."""
    parts = ["simdist", "experiment", "--task", args.task, "--profile", args.profile, "--preset", args.preset]
    parts += ["--seeds", str(ecfg.seeds), "--points", ",".join(f"{p:g}" for p in ecfg.points)]
    if ecfg.first_seed:
        parts += ["--first-seed", str(ecfg.first_seed)]
    parts += ["--methods", ",".join(ecfg.methods), "--model", str(model), "--expert", str(expert)]
    if args.oracle_model is not None:
        parts += ["--oracle-model", str(args.oracle_model)]
    parts += ["--out", str(out)]
    parts += [x for item in args.experiment_overrides for x in ("--experiment-set", item)]
    parts += [x for item in args.overrides for x in ("--set", item)]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from simdist.config import parse_overrides
    from simdist.runtime.deploy import resolve_model

    overrides = parse_overrides(args.overrides)
    load_task(args.task, overrides).profile(args.profile)  # a bad task or profile fails before any work
    extra = parse_overrides(args.experiment_overrides)
    if args.seeds is not None:
        extra["seeds"] = args.seeds
    if args.first_seed is not None:
        extra["first_seed"] = args.first_seed
    if args.points is not None:
        extra["points"] = parse_points(args.points)
    if args.methods is not None:
        extra["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    ecfg = load_experiment_config(args.preset, extra)
    model = resolve_model(args.task, args.model)
    expert = args.expert or Path("runs/experts") / args.task
    if args.oracle_model is not None:
        resolve_model(args.task, args.oracle_model)
    out = args.out or _next_out(Path("runs/experiments"), f"{args.task}_{args.profile}")
    if out.exists():
        raise ConfigError(f"--out {out} already exists: choose a new run folder")
    result = run_experiment(
        args.task,
        args.profile,
        model=model,
        expert=expert,
        out=out,
        preset=args.preset,
        config=ecfg,
        overrides=overrides,
        oracle_model=args.oracle_model,
        command=_command(args, ecfg, model, expert, out),
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    from simdist.experiment.report import headline_table

    print("\n".join(headline_table(result)))
    print(f"wrote {out / 'report.md'}")
    return 0
