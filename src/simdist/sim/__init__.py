"""Simulation layer: tasks, randomisation and dynamics profiles over the robots' MuJoCo envs (`simdist.robots`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simdist import robots
from simdist.sim.config import TaskConfig, load_task, task_config
from simdist.sim.vec_env import SimVecEnv


def make_env(
    task: str | TaskConfig,
    profile: str = "sim",
    num_envs: int = 1,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    *,
    randomize: bool = False,
    eval_commands: bool = False,
    threads: int = 1,
) -> SimVecEnv:
    """Build the vector env of a task under a dynamics profile (or the pretraining randomisation)."""
    cfg = task_config(task, overrides)
    cfg.profile(profile)  # unknown profile: one clear error before any MuJoCo work
    cls = robots.get(cfg.robot).env_class()
    return cls(
        cfg,
        profile,
        num_envs=num_envs,
        seed=seed,
        randomize=randomize,
        eval_commands=eval_commands,
        threads=threads,
    )


__all__ = ["SimVecEnv", "TaskConfig", "load_task", "make_env"]
