"""`simdist adapt`: rounds of deploy -> log -> finetune the dynamics -> hot swap -> evaluate, on a sim:<profile> robot.

Round 0 evaluates the starting model. Each round logs M minutes of robot time with the model in use, finetunes
on every bag so far (in the finetune worker process), swaps the new version in and evaluates it: the Go2 on the
task's 3 commanded speeds x 5 episodes (forward progress, m), the peg on 20 episodes (success rate). The table and
a PNG of performance against minutes of data go to the output folder; the starting model is copied there first,
so the shipped checkpoint is never modified.
"""

from __future__ import annotations

import argparse
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simdist import atomic, robots
from simdist.cli import add_overrides_argument, positive_float
from simdist.errors import ConfigError, SimdistError
from simdist.runtime.deploy import DeployLoop, resolve_model, run_deploy
from simdist.runtime.finetune_options import FinetuneOptions, add_option_arguments, options_from_args
from simdist.runtime.store import ModelStore
from simdist.runtime.worker import FinetuneWorker
from simdist.sim.config import TaskConfig, load_task, task_config


@dataclass
class RoundResult:
    round: int
    minutes: float  # minutes of robot data the model was finetuned on
    metric: str
    performance: float
    latent_error: float | None  # held-out latent MSE after this round's finetuning
    version: str
    published: bool | None
    falls: int | None = None  # evaluation episodes that ended in a fall (None: the task's robot cannot fall)
    latent_before: float | None = None  # the same held-out error of the dynamics this round started from
    steps: int | None = None  # optimiser steps this round's finetuning took
    mean_return: float | None = None  # mean over episodes of the task reward summed (a simulated robot's)
    gate: str | None = None  # "before -> after" of what the gate compared, where not the latent error alone


def episode_returns(episodes: list[dict[str, Any]]) -> list[float] | None:
    """Each episode's return (the task reward summed: what the planner maximises), or None where one has none (a
    robot that reports no reward) or there are no episodes."""
    if not episodes or not all("return" in e for e in episodes):
        return None
    return [float(e["return"]) for e in episodes]


def mean_return(episodes: list[dict[str, Any]]) -> float | None:
    returns = episode_returns(episodes)
    return None if returns is None else float(np.mean(returns))


def count_falls(episodes: list[dict[str, Any]]) -> int | None:
    """Episodes that ended in a fall, or None where no episode reports whether it fell (the arm)."""
    fell = [e["metrics"]["fell"] for e in episodes if "fell" in e["metrics"]]
    return int(sum(bool(f) for f in fell)) if fell else None


def completed(result: Any) -> None:
    """Re-raise a Ctrl-C that `run_deploy` caught (it holds the robot and closes the bag first): an evaluation or a
    collection cut short is not a figure or a round's data."""
    if result.interrupted:
        raise KeyboardInterrupt


def evaluate_on_robot(
    task: str | TaskConfig,
    profile: str,
    store: ModelStore,
    *,
    overrides: Mapping[str, Any] | None = None,
    planner: str = "cpu",
    planner_overrides: Mapping[str, Any] | None = None,
    episodes: int | None = None,
    seed: int = 10_000,
    on_start: Callable[[DeployLoop], None] | None = None,
    adapted_planner: bool = True,
) -> tuple[str, float, list[dict[str, Any]]]:
    """(metric name, value, per-episode results) of the task's evaluation (its robot's `evaluation`).
    `adapted_planner`: as `run_deploy`'s (False: the planner setting as given, whatever the version).

    `on_start(loop)` is called once, after the first tick (a diagnostic attaches itself there: `plan-grid --audit`).
    """
    from simdist.hardware.sim_robot import SimRobot

    cfg = task_config(task, overrides)
    protocol = robots.get(cfg.robot).evaluation(cfg, episodes)
    count = protocol.episodes
    robot = SimRobot(cfg, profile, seed=seed, overrides=overrides, commands=protocol.commands)
    stop = threading.Event()

    def enough(k: int, loop: DeployLoop) -> None:
        if k == 0 and on_start is not None:
            on_start(loop)
        if len(loop.stats.episodes) >= count:
            stop.set()

    result = run_deploy(
        cfg,
        f"sim:{profile}",
        store,
        robot=robot,
        overrides=overrides,
        planner=planner,
        planner_overrides={**(planner_overrides or {}), "exploration_std": 0.0},  # evaluation never explores
        adapted_planner=adapted_planner,
        ticks=(count + 1) * cfg.episode_steps,
        stop=stop,
        on_tick=enough,
        seed=seed,
    )
    completed(result)
    ended = result.stats.episodes[:count]
    if len(ended) < count:
        raise SimdistError(f"the evaluation ended after {len(ended)} of its {count} episodes")
    values = [float(e["metrics"][protocol.metric_key]) for e in ended]
    return protocol.metric, float(np.mean(values)) if values else float("nan"), ended


def _table(rows: list[RoundResult], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    falls = any(r.falls is not None for r in rows)
    returns = any(r.mean_return is not None for r in rows)
    names = ["round", "data (min)", rows[0].metric if rows else "performance"]
    names += ["falls"] * falls + ["return"] * returns + ["held-out error", "dynamics"]
    for name in names:  # the error's "before -> after" stays on one line; headers wrap instead
        table.add_column(name, justify="right", no_wrap=name == "held-out error")
    for r in rows:
        latent = "-" if r.latent_error is None else f"{r.latent_error:.4f}"
        if r.latent_before is not None and r.latent_error is not None:
            latent = f"{r.latent_before:.4f} -> {latent}"
        version = r.version + ("" if r.published in (None, True) else " (refused)")
        cells = [str(r.round), f"{r.minutes:.1f}", f"{r.performance:.3f}"]
        if falls:
            cells.append("-" if r.falls is None else str(r.falls))
        if returns:
            cells.append("-" if r.mean_return is None else f"{r.mean_return:.2f}")
        table.add_row(*cells, latent, version)
    gates = [f"round {r.round} {r.gate}" for r in rows if r.gate is not None]
    if gates:  # the gate compared latent + head errors (--dynamics-*-weight): what it decided on
        table.caption = "the gate's latent + head errors: " + ", ".join(gates)
    return table


def _plot(rows: list[RoundResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r.minutes for r in rows], [r.performance for r in rows], marker="o")
    ax.set_xlabel("minutes of robot data")
    ax.set_ylabel(rows[0].metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic.write_figure(fig, path)


def _next_out(root: Path) -> Path:
    n = 1
    while (root / f"adapt_{n:02d}").exists():
        n += 1
    return root / f"adapt_{n:02d}"


def adapt(
    task: str | TaskConfig,
    profile: str,
    *,
    rounds: int,
    minutes: float,
    model: Path,
    out: Path,
    overrides: Mapping[str, Any] | None = None,
    planner: str = "cpu",
    planner_overrides: Mapping[str, Any] | None = None,
    options: FinetuneOptions | None = None,
    eval_episodes: int | None = None,
    seed: int = 0,
    print_table: Any = None,
) -> list[RoundResult]:
    """Run the rounds; returns one row per evaluation (round 0 = the starting model)."""
    options = options or FinetuneOptions()
    cfg = task_config(task, overrides)  # loaded once; every step below gets this object
    out.mkdir(parents=True, exist_ok=False)
    work = out / "model"
    shutil.copytree(model, work, ignore=shutil.ignore_patterns("reports", atomic.TMP_PATTERN))
    store = ModelStore(work)
    title = f"{cfg.task} on sim:{profile}"
    evaluate = dict(
        overrides=overrides, planner=planner, planner_overrides=planner_overrides, episodes=eval_episodes
    )
    metric, value, ended = evaluate_on_robot(cfg, profile, store, **evaluate)  # type: ignore[arg-type]
    rows = [
        RoundResult(
            0, 0.0, metric, value, None, store.label, None, count_falls(ended), mean_return=mean_return(ended)
        )
    ]
    if print_table is not None:  # the starting point at once: a round takes minutes
        print_table(_table(rows, title))
    bags: list[Path] = []
    for r in range(1, rounds + 1):
        result = run_deploy(
            cfg,
            f"sim:{profile}",
            store,
            seconds=minutes * 60.0,
            bag_dir=out / "bags",
            overrides=overrides,
            planner=planner,
            planner_overrides=planner_overrides,
            seed=seed + r,
        )
        completed(result)
        assert result.bag is not None
        bags.append(result.bag)
        report = FinetuneWorker(work, bags, options).start().wait()
        store.reload_now()  # between runs: pick up the published version (if the gate let one through)
        metric, value, ended = evaluate_on_robot(cfg, profile, store, **evaluate)  # type: ignore[arg-type]
        rows.append(
            RoundResult(
                r,
                report["minutes_of_data"],
                metric,
                value,
                report["mean_after"],
                store.label,
                report["published"],
                count_falls(ended),
                report["mean_before"],
                report["steps"],
                mean_return(ended),
                None
                if report["gate_measure"] == "held-out latent error"
                else f"{report['gate_before']:.4f} -> {report['gate_after']:.4f}",
            )
        )
        if print_table is not None:
            print_table(_table(rows, title))
    atomic.write_json(out / "adapt.json", [r.__dict__ for r in rows], indent=1)
    _plot(rows, out / "adapt.png", title)
    return rows


ADAPT_OPTIONS = (
    "max_steps",
    "max_minutes",
    "lr",
    "eval_every",
    "warmup_steps",
    "final_lr_fraction",
    "val_fraction",
    "dynamics_reward_weight",
    "dynamics_value_weight",
    "start_from",
    "seed",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument("--profile", required=True, help="the robot: sim:<profile> (e.g. ptfe, foam, real)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--minutes", type=positive_float, default=15.0, help="robot minutes logged per round")
    parser.add_argument(
        "--model", type=Path, default=None, help="starting checkpoint (default: models/<task>/)"
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: runs/adapt/adapt_NN)")
    parser.add_argument("--planner", default="cpu")
    parser.add_argument(
        "--planner-set", dest="planner_overrides", action="append", default=[], metavar="KEY=VALUE"
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=None,
        help="episodes per commanded speed (Go2, default 5) or in all (peg, default 20)",
    )
    add_option_arguments(parser, ADAPT_OPTIONS)  # each round's finetuning; --seed seeds the deploy runs too
    add_overrides_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from simdist.config import parse_overrides

    overrides = parse_overrides(args.overrides)
    cfg = load_task(args.task, overrides)  # the command's one TaskConfig, passed down
    cfg.profile(args.profile)  # a bad task or profile fails before any work
    model = resolve_model(args.task, args.model)
    out = args.out or _next_out(Path("runs") / "adapt")
    if out.exists():
        raise ConfigError(
            f"--out {out} already exists: choose a new folder (the run writes a copy of the model there)"
        )
    options = options_from_args(args, ADAPT_OPTIONS)
    console = Console()
    rows = adapt(
        cfg,
        args.profile,
        rounds=args.rounds,
        minutes=args.minutes,
        model=model,
        out=out,
        overrides=overrides,
        planner=args.planner,
        planner_overrides=parse_overrides(args.planner_overrides),
        options=options,
        eval_episodes=args.eval_episodes,
        seed=args.seed,
        print_table=console.print,
    )
    if args.rounds == 0:
        console.print(_table(rows, f"{args.task} on sim:{args.profile}"))
    print(f"wrote {out / 'adapt.json'} and {out / 'adapt.png'}")
    return 0
