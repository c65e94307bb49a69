"""A small randomised linear system that produces episodes in the dataset's format (tests and smoke runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def linear_system_episodes(
    num_episodes: int,
    *,
    obs_dim: int = 6,
    act_dim: int = 2,
    cmd_dim: int = 2,
    length: int | tuple[int, int] = 40,
    seed: int = 0,
    first_id: int = 0,
    image: bool = False,
    expert_labels: bool = False,
) -> list[tuple[dict[str, np.ndarray], dict[str, float]]]:
    """Episodes of x' = A x + g B a with a per-episode random gain g, a noisy expert and exact discounted values
    (and with `expert_labels` the expert's clean action at every step as `expert_action`).

    Returns (episode arrays, params) pairs ready for `ShardWriter.add_episode`.
    """
    rng = np.random.default_rng(seed)
    a_matrix = np.eye(obs_dim) * 0.9 + rng.normal(0, 0.05, (obs_dim, obs_dim))
    a_matrix *= min(1.0, 0.95 / np.abs(np.linalg.eigvals(a_matrix)).max())  # stable at any size
    b_matrix = rng.normal(0, 0.5 / np.sqrt(max(obs_dim / 6, 1.0)), (obs_dim, act_dim))
    b_norm2 = float(np.linalg.norm(b_matrix, 2) ** 2)  # keeps the closed loop stable (no period-2 ringing)
    out = []
    for e in range(num_episodes):
        n = int(rng.integers(length[0], length[1] + 1)) if isinstance(length, tuple) else length
        gain = float(rng.uniform(0.5, 1.5))
        command = np.repeat(rng.normal(0, 1, (1, cmd_dim)), n, axis=0).astype(np.float32)
        x = rng.normal(0, 1, obs_dim)
        noise_std = float(rng.uniform(0.0, 0.5))
        proprio, actions, rewards, flags, labels = [], [], [], [], []
        for t in range(n):
            target = np.zeros(obs_dim)
            target[:cmd_dim] = command[t]
            expert = np.clip(-0.5 * b_matrix.T @ (x - target) / b_norm2, -2, 2)
            noisy = rng.random() < 0.3
            action = expert + (rng.normal(0, noise_std, act_dim) if noisy else 0.0)
            proprio.append(x.copy())
            actions.append(action)
            rewards.append(-float(np.sum((x[:cmd_dim] - command[t]) ** 2)) - 0.01 * float(action @ action))
            flags.append(not noisy)
            labels.append(expert)
            x = a_matrix @ x + gain * b_matrix @ action
        rewards_arr = np.asarray(rewards, dtype=np.float64)
        values = np.zeros(n)
        running = 0.0
        for t in reversed(range(n)):
            running = rewards_arr[t] + 0.99 * running
            values[t] = running
        episode = {
            "proprio": np.asarray(proprio, dtype=np.float32),
            "command": command,
            "action": np.asarray(actions, dtype=np.float32),
            "reward": rewards_arr.astype(np.float32),
            "value": values.astype(np.float32),
            "expert_flag": np.asarray(flags, dtype=bool),
            "episode": np.full(n, first_id + e, dtype=np.int64),
            "step": np.arange(n, dtype=np.int32),
        }
        if expert_labels:
            episode["expert_action"] = np.asarray(labels, dtype=np.float32)
        if image:
            episode["image"] = rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8)
        out.append((episode, {"gain": gain, "noise_std": noise_std}))
    return out


def write_linear_dataset(
    out_dir: str | Path, num_episodes: int, *, steps_per_shard: int = 200, task: str = "linear", **kwargs: Any
) -> Path:
    """A complete synthetic dataset folder (several shards) for tests and smoke runs."""
    from simdist.data.writer import ShardWriter

    info = {"task": task, "preset": "synthetic", "config_hash": "synthetic"}
    with ShardWriter(out_dir, info, steps_per_shard=steps_per_shard) as writer:
        for episode, params in linear_system_episodes(num_episodes, **kwargs):
            writer.add_episode(episode, params)
    return Path(out_dir)
