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
    """Roll out `policy` for `episodes` episodes; evaluation commands, no randomisation.

    Episodes are taken in rounds, each member's first, then each member's second, ..., in member order, never in
    the order they finish: a member that falls early would otherwise start (and fall in) more episodes before the
    others time out, and fill the count with falls at its command."""
    robot = robots.get(cfg.robot)
    n = min(episodes, num_envs or 30)
    sets = len(robot.evaluation(cfg, 1).commands or [None])  # the evaluation's commands (the Go2's speeds)
    n = max(sets, n - n % sets)  # whole sets of them
    env = make_env(cfg, profile, num_envs=n, seed=seed, eval_commands=True)
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(n)
    rounds = -(-episodes // n)
    finished: list[list[tuple[float, dict[str, float]]]] = [[] for _ in range(n)]
    while min(len(f) for f in finished) < rounds:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        returns += reward
        done = terminated | truncated
        for i in np.flatnonzero(done):
            finished[i].append(
                (float(returns[i]), {k: float(v[i]) for k, v in info["final_metrics"].items()})
            )
            returns[i] = 0.0
    env.close()
    taken = [finished[i][r] for r in range(rounds) for i in range(n)][:episodes]
    done_returns = [ret for ret, _ in taken]
    done_metrics = [metrics for _, metrics in taken]
    result: dict[str, Any] = {
        "profile": profile,
        "episodes": episodes,
        "mean_return": float(np.mean(done_returns)),
    }
    result.update(robot.summarize(done_metrics))
    return result
