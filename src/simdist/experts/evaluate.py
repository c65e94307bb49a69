"""Evaluate a policy over N episodes of a task under a profile: return, Go2 forward progress and falls, peg success."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simdist.sim import make_env
from simdist.sim.config import TaskConfig

Policy = Callable[[dict[str, np.ndarray]], np.ndarray]


def evaluate(
    policy: Policy,
    cfg: TaskConfig,
    profile: str,
    episodes: int,
    seed: int = 10_000,
    num_envs: int | None = None,
) -> dict[str, Any]:
    """Roll out `policy` until `episodes` episodes have finished; evaluation commands, no randomisation."""
    n = min(episodes, num_envs or 30)
    if cfg.robot == "go2":
        n = max(3, n - n % 3)  # whole sets of the three evaluation speeds
    env = make_env(cfg, profile, num_envs=n, seed=seed, eval_commands=True)
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(n)
    done_returns: list[float] = []
    done_metrics: list[dict[str, float]] = []
    while len(done_returns) < episodes:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        returns += reward
        done = terminated | truncated
        for i in np.flatnonzero(done):
            if len(done_returns) < episodes:
                done_returns.append(float(returns[i]))
                done_metrics.append({k: float(v[i]) for k, v in info["final_metrics"].items()})
            returns[i] = 0.0
    env.close()
    result: dict[str, Any] = {
        "profile": profile,
        "episodes": episodes,
        "mean_return": float(np.mean(done_returns)),
    }
    keys = done_metrics[0].keys()
    means = {k: float(np.mean([m[k] for m in done_metrics])) for k in keys}
    if cfg.robot == "go2":
        progress = np.array([m["progress_m"] for m in done_metrics])
        commanded = np.array([m["commanded_m"] for m in done_metrics])
        result.update(
            progress_m=float(progress.mean()),
            commanded_m=float(commanded.mean()),
            progress_fraction=float(progress.sum() / max(commanded.sum(), 1e-9)),
            fall_rate=means["fell"],
        )
    else:
        result.update(success_rate=means["success"])
    return result
