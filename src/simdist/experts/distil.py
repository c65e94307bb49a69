"""An actor network for a scripted expert, by DAgger: the controller labels the states the network visits.

The scripted peg controller has no network for PPO to resume; the RL-finetuning baseline needs one. The actor
(rsl-rl's MLPModel on the actor observations, the same as a PPO expert's) is fitted by regression on the
controller's actions. Round 0 rolls out the controller; later rounds roll out the network, so the data cover the
states the network reaches by its own mistakes (Ross et al., 2011). All in simulation, under the pretraining
randomisation: no real-profile step is spent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from rsl_rl.models import MLPModel
from tensordict import TensorDict

from simdist.experts.policy import build_mlp
from simdist.experts.rsl_env import to_tensordict
from simdist.sim import make_env
from simdist.sim.config import TaskConfig

Controller = Callable[[dict[str, np.ndarray]], np.ndarray]


def distil_actor(
    cfg: TaskConfig,
    manifest: dict[str, Any],
    controller: Controller,
    *,
    num_envs: int,
    rounds: int,
    fit_steps: int,
    action_std: float,
    seed: int,
) -> tuple[MLPModel, dict[str, float]]:
    """The fitted actor (its Gaussian std set to `action_std`) and the fit's final mean squared error."""
    torch.manual_seed(seed)
    keys = manifest["obs_groups"]["actor"]
    actor = build_mlp(manifest, "actor")
    optim = torch.optim.Adam(actor.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    env = make_env(cfg, "sim", num_envs=num_envs, seed=seed, randomize=True)
    obs, _ = env.reset(seed=seed)
    inputs: list[dict[str, np.ndarray]] = []
    labels: list[np.ndarray] = []
    loss = torch.zeros(())
    for round_ in range(rounds):
        actor.eval()
        chunk = []
        for _ in range(cfg.episode_steps):
            target = controller(obs)
            chunk.append({k: obs[k].copy() for k in keys})
            labels.append(target)
            if round_ == 0:
                action = target
            else:
                with torch.inference_mode():
                    action = actor(_actor_obs(obs, keys)).numpy()
            obs, *_ = env.step(action)
        inputs.extend(chunk)
        actor.train()
        actor.update_normalization(_actor_obs(_stack(chunk, keys), keys))
        data = _actor_obs(_stack(inputs, keys), keys)
        y = torch.as_tensor(np.concatenate(labels), dtype=torch.float32)
        for _ in range(fit_steps):
            idx = torch.randint(len(y), (512,), generator=gen)
            loss = torch.mean((actor(data[idx]) - y[idx]) ** 2)
            optim.zero_grad()
            loss.backward()
            optim.step()
    env.close()
    actor.eval()
    with torch.no_grad():
        actor.distribution.std_param.fill_(action_std)
    return actor, {"fit_mse": float(loss.item()), "samples": len(labels) * num_envs}


def _stack(chunks: list[dict[str, np.ndarray]], keys: list[str]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([c[k] for c in chunks]) for k in keys}


def _actor_obs(obs: dict[str, np.ndarray], keys: list[str]) -> TensorDict:
    return to_tensordict({k: obs[k] for k in keys}, len(obs[keys[0]]))
