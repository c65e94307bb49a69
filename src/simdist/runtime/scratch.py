"""A randomly initialised world-model checkpoint for a task: smoke runs, tests and timing without pretraining.

The normaliser comes from a short rollout of the task with random actions, so that inputs are roughly z-scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simdist.model.checkpoint import save_checkpoint
from simdist.model.config import load_model_config
from simdist.model.world_model import WorldModel


def rollout_stats(task: str, *, steps: int = 200, seed: int = 0) -> tuple[dict[str, int], dict[str, Any]]:
    """(dims, normaliser statistics in the manifest's format) from `steps` random-action steps of the task."""
    from simdist.sim import make_env

    env = make_env(task, "sim", num_envs=4, seed=seed, randomize=True)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    proprio, command, action, reward = [], [], [], []
    for _ in range(steps // 4):
        a = rng.normal(0.0, 0.5, (env.num_envs, env.action_dim)).astype(np.float32)
        proprio.append(obs["proprio"])
        command.append(obs["command"])
        action.append(a)
        obs, r, _, _, _ = env.step(a)
        reward.append(r)
    env.close()
    data = {
        "proprio": np.concatenate(proprio),
        "command": np.concatenate(command),
        "action": np.concatenate(action),
        "reward": np.concatenate(reward)[:, None],
    }
    data["value"] = data["reward"] * 20.0
    stats = {k: {"mean": v.mean(0).tolist(), "std": v.std(0).tolist()} for k, v in data.items()}
    dims = {"obs_dim": env.proprio_dim, "act_dim": env.action_dim, "cmd_dim": env.command_dim}
    return dims, stats


def write_random_checkpoint(
    folder: str | Path,
    task: str,
    *,
    preset: str = "tiny",
    seed: int = 0,
    model_overrides: Mapping[str, Any] | None = None,
) -> Path:
    """A checkpoint folder (dynamics v0000) holding a randomly initialised model of `preset` size for `task`."""
    dims, stats = rollout_stats(task, seed=seed)
    torch.manual_seed(seed)
    model = WorldModel.build(dims, load_model_config(preset, model_overrides), stats)
    return save_checkpoint(
        model, folder, task=task, data_hash="random", extra={"random_init": True, "seed": seed}
    )
