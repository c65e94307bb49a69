"""The project's vector env seen through rsl-rl-lib's VecEnv interface (torch tensors in a TensorDict)."""

from __future__ import annotations

import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from simdist.sim.vec_env import SimVecEnv

ACTOR_KEYS = ("proprio", "command", "clock")  # what a real robot's controller has
CRITIC_KEYS = ("privileged", "clock")  # simulator truth


def obs_groups(env: SimVecEnv) -> dict[str, list[str]]:
    keys = set(env.single_observation_space.spaces)
    return {
        "actor": [k for k in ACTOR_KEYS if k in keys],
        "critic": [k for k in CRITIC_KEYS if k in keys],
    }


def to_tensordict(obs: dict[str, np.ndarray], num_envs: int) -> TensorDict:
    return TensorDict(
        {k: torch.as_tensor(v, dtype=torch.float32) for k, v in obs.items() if k != "image"},
        batch_size=[num_envs],
    )


class RslVecEnv(VecEnv):
    """Adapter: numpy SimVecEnv -> rsl-rl. Time-outs are reported so PPO bootstraps truncated episodes."""

    def __init__(self, env: SimVecEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.action_dim
        self.max_episode_length = env.cfg.episode_steps
        self.episode_length_buf = torch.zeros(env.num_envs, dtype=torch.long)
        self.device = "cpu"
        self.cfg = {"task": env.cfg.task, "profile": env.profile_name}
        obs, _ = env.reset()
        self._obs = to_tensordict(obs, env.num_envs)
        self.completed: list[dict[str, float]] = []

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions.detach().cpu().numpy())
        self._obs = to_tensordict(obs, self.num_envs)
        self.episode_length_buf = torch.as_tensor(self.env.steps.copy())
        done = terminated | truncated
        extras: dict = {"time_outs": torch.as_tensor(truncated & ~terminated, dtype=torch.float32)}
        if done.any():
            metrics = info["final_metrics"]
            extras["log"] = {f"/{k}": float(np.mean(v[done])) for k, v in metrics.items()}
        return self._obs, torch.as_tensor(reward), torch.as_tensor(done, dtype=torch.long), extras
