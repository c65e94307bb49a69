"""Expert presets (config/expert/<preset>.yaml) as a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simdist.config import apply_overrides, build, load_named


@dataclass(frozen=True)
class ExpertConfig:
    num_envs: int
    steps_per_env: int
    iterations: int
    max_minutes: float
    checkpoints: list[int]
    actor_hidden: list[int]
    critic_hidden: list[int]
    activation: str
    init_std: float
    learning_rate: float
    entropy_coef: float
    learning_epochs: int
    mini_batches: int
    gamma: float
    lam: float
    desired_kl: float
    eval_episodes: int
    critic_fit_steps: int
    seed: int
    peg_expert: str = "scripted"  # ur5e_peg: "scripted" (force-guided search on measurements) or "ppo"
    # the scripted expert's actor network (DAgger in simulation), for the RL-finetuning baseline to resume
    distil_rounds: int = 6
    distil_fit_steps: int = 1000
    distil_action_std: float = 0.1  # the Gaussian std PPO starts from


def load_expert_config(preset: str, overrides: dict[str, Any] | None = None) -> ExpertConfig:
    return build(ExpertConfig, apply_overrides(load_named("expert", preset), overrides or {}))
