"""Evaluate a policy over N episodes of a task under a profile: return, Go2 forward progress and falls, peg success."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simdist import robots
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
    robot = robots.get(cfg.robot)
    n = min(episodes, num_envs or 30)
    sets = len(robot.evaluation(cfg, 1).commands or [None])  # the evaluation's commands (the Go2's speeds)
    n = max(sets, n - n % sets)  # whole sets of them
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
    result.update(robot.summarize(done_metrics))
    return result
