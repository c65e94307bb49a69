"""Simulation layer: the project's Go2 and UR5e in MuJoCo, the tasks, randomisation and dynamics profiles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simdist.sim.config import TaskConfig, load_task
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
    cfg = task if isinstance(task, TaskConfig) else load_task(task, overrides)
    cfg.profile(profile)  # unknown profile: one clear error before any MuJoCo work
    if cfg.robot == "go2":
        from simdist.sim.go2 import Go2Env as cls
    else:
        from simdist.sim.ur5e import PegEnv as cls  # type: ignore[assignment]
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
