"""The RL-finetuning baseline: PPO (rsl-rl OnPolicyRunner) resumed from the expert's actor and critic on the real
profile, with exactly the real-data budget of the other methods, counted in environment steps. A scripted expert
(the peg's search controller) is resumed through its distilled actor network (simdist.experts.distil).

The critic keeps its privileged observations (the simulator's truth), which a real robot could not give it: this
favours the baseline. Evaluation is the task's protocol with the deterministic actor: one episode per environment,
Go2 environments i take evaluation speed i mod 3, so 15 environments are exactly 3 speeds x 5 episodes. These are
draws of the protocol's distribution from the same evaluation seed, not the world-model methods' very episodes
(those run one after another on one robot): an RL figure is compared unpaired.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from simdist.errors import ConfigError
from simdist.experts.config import load_expert_config
from simdist.experts.policy import Expert, ExpertPolicy, actor_file, atomic_safetensors
from simdist.experts.rsl_env import RslVecEnv
from simdist.sim import make_env
from simdist.sim.config import TaskConfig


class CountingVecEnv(RslVecEnv):
    """RslVecEnv that counts every environment step it executes (the real-data budget of PPO)."""

    env_steps = 0

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict]:
        self.env_steps += self.num_envs
        return super().step(actions)


@dataclass
class RlFinetuner:
    """PPO on the real profile, resumed from an expert; `train(steps)` spends exactly `steps` environment steps."""

    runner: Any
    env: CountingVecEnv
    manifest: dict[str, Any]
    steps_per_iteration: int

    @classmethod
    def create(
        cls,
        cfg: TaskConfig,
        profile: str,
        expert_dir: Path,
        *,
        expert_preset: str,
        num_envs: int,
        steps_per_env: int,
        seed: int,
        expert_overrides: dict[str, Any] | None = None,
    ) -> RlFinetuner:
        from rsl_rl.runners import OnPolicyRunner

        from simdist.experts.train import _rsl_config

        expert = Expert(expert_dir)
        manifest = expert.manifest
        actor = actor_file(manifest)
        if actor is None:
            raise ConfigError(
                f"rl_finetune needs an actor network; {expert_dir} is a {manifest['kind']} expert without one "
                "(train it again with `simdist expert train`)"
            )
        sizes = {k: manifest[k] for k in ("actor_hidden", "critic_hidden", "activation")}
        ecfg = load_expert_config(
            expert_preset,
            {**dict(expert_overrides or {}), **sizes, "num_envs": num_envs, "steps_per_env": steps_per_env},
        )
        torch.manual_seed(seed)
        sim = make_env(cfg, profile, num_envs=num_envs, seed=seed, randomize=False)
        env = CountingVecEnv(sim)
        with contextlib.redirect_stdout(io.StringIO()):  # rsl-rl prints the networks it built
            runner = OnPolicyRunner(
                env, _rsl_config(ecfg, manifest["obs_groups"]), log_dir=None, device="cpu"
            )
        runner.alg.actor.load_state_dict(load_file(str(Path(expert_dir) / actor)))
        runner.alg.critic.load_state_dict(load_file(str(Path(expert_dir) / manifest["critic"])))
        return cls(runner, env, manifest, num_envs * steps_per_env)

    def train(self, steps: int) -> int:
        """PPO iterations worth exactly `steps` environment steps; returns the iterations run."""
        if steps % self.steps_per_iteration:
            raise ConfigError(
                f"{steps} steps is not a whole number of {self.steps_per_iteration}-step iterations"
            )
        iterations = steps // self.steps_per_iteration
        if iterations:
            with contextlib.redirect_stdout(io.StringIO()):  # rsl-rl prints a report per iteration
                self.runner.learn(iterations)
        return iterations

    def actor_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.runner.alg.actor.state_dict().items()}

    def save_actor(self, path: Path) -> None:
        atomic_safetensors(path, self.runner.alg.actor.state_dict())

    def evaluate(self, cfg: TaskConfig, profile: str, count: int, seed: int) -> list[dict[str, float]]:
        actor = self.runner.alg.actor
        actor.eval()  # deterministic actions and frozen observation normaliser
        try:
            return evaluate_first_episodes(
                ExpertPolicy(self.manifest, "rl", model=actor).act, cfg, profile, count, seed
            )
        finally:
            self.runner.alg.train_mode()

    def close(self) -> None:
        self.env.env.close()


def evaluate_first_episodes(
    policy: Callable[[dict[str, np.ndarray]], np.ndarray],
    cfg: TaskConfig,
    profile: str,
    count: int,
    seed: int,
) -> list[dict[str, float]]:
    """The final metrics of the first episode of each of `count` environments (evaluation commands)."""
    env = make_env(cfg, profile, num_envs=count, seed=seed, eval_commands=True)
    obs, _ = env.reset(seed=seed)
    results: list[dict[str, float] | None] = [None] * count
    while any(r is None for r in results):
        obs, _, terminated, truncated, info = env.step(policy(obs))
        for i in np.flatnonzero(terminated | truncated):
            if results[i] is None:
                results[i] = {k: float(v[i]) for k, v in info["final_metrics"].items()}
    env.close()
    return [r for r in results if r is not None]
