"""`simdist calibrate`: how much a candidate "real" profile costs the zero-shot controller, before any adaptation.

For each value of one profile parameter, the zero-shot SimDist controller (the pretrained world model through the
planner, lockstep, the task's evaluation protocol) and the expert (the peg's search controller, or a Go2 expert
folder when given) are evaluated on `sim` and on the profile with that value; the table gives each one's share of
its `sim` performance. The profile is then chosen by the rule written in docs/results.md before the measurements,
never from adaptation results. Writes calibration.json in --out (atomically) and prints the table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from simdist import robots
from simdist.cli import add_overrides_argument
from simdist.errors import ConfigError
from simdist.sim.config import TaskConfig, load_task


def _parse_values(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--values must be numbers separated by commas, got '{text}'") from None
    if not values:
        raise ConfigError("--values is empty")
    return values


def _expert_policy(cfg: TaskConfig, expert: Path | None) -> Any:
    """The expert's action function, or None when there is none to evaluate."""
    if expert is not None:
        from simdist.experts.policy import Expert

        return Expert(expert).final.act
    return robots.get(cfg.robot).scripted_expert(cfg)


def measure(
    task: str,
    profile: str,
    param: str,
    values: list[float],
    *,
    model: Path,
    expert: Path | None = None,
    episodes: int | None = None,
    expert_episodes: int = 30,
    seed: int = 10_000,
    overrides: dict[str, Any] | None = None,
    planner: str = "cpu",
    log: Any = print,
) -> dict[str, Any]:
    """Zero-shot planner and expert on `sim` and on `profile` with `param` at each value (see the module doc)."""
    from simdist.experiment.run import episode_stats
    from simdist.experts.evaluate import evaluate
    from simdist.runtime.adapt import evaluate_on_robot
    from simdist.runtime.store import ModelStore

    base = dict(overrides or {})
    cfg = load_task(task, base)
    if profile not in cfg.profiles or profile == "sim":
        raise ConfigError(f"unknown profile '{profile}' for {task}; choose from: {', '.join(cfg.profiles)}")
    key = f"profiles.{profile}.{param}"
    load_task(task, {**base, key: values[0]})  # an unknown parameter is refused here, before any evaluation
    evaluation = robots.get(cfg.robot).evaluation(cfg, episodes)
    metric, metric_key, description = evaluation.metric, evaluation.metric_key, evaluation.description
    policy = _expert_policy(cfg, expert)
    store = ModelStore(model)

    def planner_on(name: str, extra: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        _, value, ended = evaluate_on_robot(
            task, name, store, overrides={**base, **extra}, planner=planner, episodes=episodes, seed=seed
        )
        stats = episode_stats(ended, metric_key)
        del stats["per_episode"]
        return {**stats, "value": value, "seconds": time.perf_counter() - start}

    def expert_on(name: str, extra: dict[str, Any]) -> dict[str, Any] | None:
        if policy is None:
            return None
        result = evaluate(policy, load_task(task, {**base, **extra}), name, expert_episodes, seed=seed)
        value = result[robots.get(cfg.robot).summary_key]
        return {"value": float(value), "falls": result.get("fall_rate"), "episodes": expert_episodes}

    rows: list[dict[str, Any]] = []
    sim_planner = planner_on("sim", {})
    sim_expert = expert_on("sim", {})
    log(
        f"sim: zero-shot {sim_planner['value']:.3f}"
        + (f", expert {sim_expert['value']:.3f}" if sim_expert else "")
    )
    for value in values:
        extra = {key: value}
        row: dict[str, Any] = {
            param: value,
            "planner": planner_on(profile, extra),
            "expert": expert_on(profile, extra),
        }
        row["planner_share"] = row["planner"]["value"] / max(sim_planner["value"], 1e-9)
        if row["expert"] is not None and sim_expert is not None:
            row["expert_share"] = row["expert"]["value"] / max(sim_expert["value"], 1e-9)
        rows.append(row)
        log(
            f"{param}={value:g}: zero-shot {row['planner']['value']:.3f} ({row['planner_share']:.0%} of sim, "
            f"{row['planner']['falls']} falls)"
            + (f", expert {row['expert']['value']:.3f} ({row['expert_share']:.0%})" if row["expert"] else "")
        )
    return {
        "task": task,
        "profile": profile,
        "parameter": param,
        "metric": metric,
        "protocol": description,
        "episodes": evaluation.episodes,
        "seed": seed,
        "planner": planner,
        "model": str(model),
        "overrides": base,
        "sim": {"planner": sim_planner, "expert": sim_expert},
        "rows": rows,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument("--profile", required=True, help="the profile to calibrate (e.g. ptfe, foam, real)")
    parser.add_argument("--param", required=True, help="the profile's parameter to vary (e.g. friction)")
    parser.add_argument("--values", required=True, help="candidate values, comma-separated, mild to severe")
    parser.add_argument("--model", type=Path, default=None, help="world model (default models/<task>)")
    parser.add_argument("--expert", type=Path, default=None, help="a trained expert folder to evaluate too")
    parser.add_argument("--episodes", type=int, default=None, help="per speed (Go2) or in all (peg)")
    parser.add_argument("--expert-episodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=None, help="folder for calibration.json")
    add_overrides_argument(parser)


def run(args: argparse.Namespace) -> int:
    from simdist.config import parse_overrides
    from simdist.experts.policy import atomic_json
    from simdist.runtime.deploy import resolve_model

    overrides = parse_overrides(args.overrides)
    model = resolve_model(args.task, args.model)
    result = measure(
        args.task,
        args.profile,
        args.param,
        _parse_values(args.values),
        model=model,
        expert=args.expert,
        episodes=args.episodes,
        expert_episodes=args.expert_episodes,
        seed=args.seed,
        overrides=overrides,
    )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_json(args.out / "calibration.json", result)
        print(f"wrote {args.out / 'calibration.json'}")
    return 0
