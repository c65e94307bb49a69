"""`simdist data generate`: the pretraining corpus by the paper's recipe.

Per environment and reset, the final expert acts with probability `expert_probability`, otherwise a checkpoint
drawn uniformly. Action-noise bursts of U[burst) steps alternate with clean stretches of U[clean) steps, with a
per-environment, per-dimension noise std drawn once from `noise_std_range`; a share of environments is never noised.
expert_flag is true exactly where the final expert acted and no noise was added; expert_action is what the final
expert would have sent at every step, whoever acted (sanitised and clipped as the simulator executes it), so that
behaviour cloning can learn the expert's answer in the states the noise and the checkpoints lead to (DAgger's labels).
The final expert is deterministic, so recording it leaves the executed trajectories as they were.

Shard k is generated from seed (seed, k) alone, so an interrupted run resumes at the first missing shard and
produces the same dataset as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.progress import Progress

from simdist.config import apply_overrides, build, config_hash, load_named
from simdist.data.writer import ShardWriter, resume
from simdist.experts.policy import Expert
from simdist.sim import make_env
from simdist.sim.config import TaskConfig
from simdist.sim.vec_env import sanitize_actions


@dataclass(frozen=True)
class DataConfig:
    num_envs: int
    steps: int
    steps_per_shard: int
    expert_probability: float
    noise_burst_steps: list[int]
    clean_steps: list[int]
    noise_std_range: list[float]
    never_noised_share: float
    randomize: bool
    seed: int


def load_data_config(preset: str, overrides: dict[str, Any] | None = None) -> DataConfig:
    return build(DataConfig, apply_overrides(load_named("data", preset), overrides or {}))


class NoiseSchedule:
    """Per-environment alternation of noise bursts and clean stretches, with fixed per-dimension stds."""

    def __init__(self, dcfg: DataConfig, num_envs: int, action_dim: int, rng: np.random.Generator) -> None:
        self.dcfg, self.rng = dcfg, rng
        low, high = dcfg.noise_std_range
        self.std = rng.uniform(low, high, (num_envs, action_dim))
        self.never = rng.uniform(size=num_envs) < dcfg.never_noised_share
        self.noisy = np.zeros(num_envs, dtype=bool)
        self.left = rng.integers(*dcfg.clean_steps, size=num_envs)  # start with a clean stretch

    def step(self) -> np.ndarray:
        """Whether each environment is noised this step; advances the schedule."""
        noisy = self.noisy & ~self.never
        self.left -= 1
        switch = self.left <= 0
        for i in np.flatnonzero(switch):
            self.noisy[i] = not self.noisy[i]
            bounds = self.dcfg.noise_burst_steps if self.noisy[i] else self.dcfg.clean_steps
            self.left[i] = self.rng.integers(*bounds)
        return noisy


def generate_shard(
    cfg: TaskConfig, dcfg: DataConfig, expert: Expert, shard: int, target_steps: int
) -> list[tuple[dict, dict]]:
    """Whole episodes totalling at least `target_steps` transitions, from seed (dcfg.seed, shard).

    Once the target is reached no new episode starts, and the episodes still running are recorded to their end: a
    shard that dropped them would keep the short ones (falls, early checkpoints) and lose the long ones, so its
    policy mix would drift from `expert_probability` (the more, the fewer steps a shard gives each environment).
    A shard therefore holds up to one episode per environment beyond the target."""
    torch.set_num_threads(1)  # small MLPs: a second thread only adds contention with the simulator
    seed = int(np.random.SeedSequence([dcfg.seed, shard]).generate_state(1)[0])
    rng = np.random.default_rng(seed)
    expert.reseed(seed)
    env = make_env(cfg, "sim", num_envs=dcfg.num_envs, seed=seed, randomize=dcfg.randomize)
    obs, _ = env.reset(seed=seed)
    n, policies = env.num_envs, [expert.final, *expert.policies]
    schedule = NoiseSchedule(dcfg, n, env.action_dim, rng)
    # policy index per environment: 0 = final expert, k >= 1 = checkpoint k-1
    choice = np.zeros(n, dtype=np.int64)

    def draw(i: int) -> None:
        choice[i] = 0 if rng.uniform() < dcfg.expert_probability else 1 + rng.integers(len(policies) - 1)

    for i in range(n):
        draw(i)
    buffers: list[dict[str, list]] = [_empty(cfg) for _ in range(n)]
    episodes: list[tuple[dict, dict]] = []
    recorded = 0
    running = np.ones(n, dtype=bool)  # recording an episode; False once it ended after the target was reached
    while running.any():
        value = expert.value(obs)
        actions = np.zeros((n, env.action_dim), dtype=np.float32)
        for k in np.unique(choice):
            members = choice == k
            actions[members] = policies[k].act({key: v[members] for key, v in obs.items()})
        noisy = schedule.step()
        actions[noisy] += (rng.normal(size=(int(noisy.sum()), env.action_dim)) * schedule.std[noisy]).astype(
            np.float32
        )
        labels = sanitize_actions(expert.final.act(obs), cfg.action_clip)[0]
        step_obs = obs
        obs, reward, terminated, truncated, info = env.step(actions)
        executed = info["action"]  # after sanitising and clipping: what the robot was actually told
        flag = (choice == 0) & ~noisy
        for i in np.flatnonzero(running):
            b = buffers[i]
            b["proprio"].append(step_obs["proprio"][i])
            b["command"].append(step_obs["command"][i])
            b["action"].append(executed[i].copy())
            b["reward"].append(reward[i])
            b["value"].append(value[i])
            b["expert_flag"].append(flag[i])
            b["expert_action"].append(labels[i])
            if "image" in step_obs:
                b["image"].append(step_obs["image"][i])
        for i in np.flatnonzero((terminated | truncated) & running):
            arrays = {k: np.asarray(v) for k, v in buffers[i].items() if v}
            arrays["step"] = np.arange(len(arrays["proprio"]), dtype=np.int32)
            params = {name: float(info["final_params"][name][i]) for name in env.param_names}
            params["policy"] = float(choice[i])  # 0 = final expert, k = checkpoint k-1 (analysis only)
            episodes.append((arrays, params))
            recorded += len(arrays["proprio"])
            buffers[i] = _empty(cfg)
            if recorded < target_steps:
                draw(i)
            else:
                running[i] = False
    env.close()
    return episodes


def _empty(cfg: TaskConfig) -> dict[str, list]:
    keys = ["proprio", "command", "action", "reward", "value", "expert_flag", "expert_action"]
    return {k: [] for k in keys + (["image"] if cfg.camera.enabled else [])}


def generate(cfg: TaskConfig, dcfg: DataConfig, expert_dir: Path, out: Path, preset: str) -> dict[str, Any]:
    """Generate (or resume) the dataset in `out`; returns a summary."""
    expert = Expert(expert_dir)
    info = {
        "task": cfg.task,
        "preset": preset,
        "config_hash": config_hash(
            {
                "task": dataclasses.asdict(cfg),
                "data": dataclasses.asdict(dcfg),
                "expert": expert.manifest["config_hash"],
                # the weights too: resuming with another training of the same config would mix two experts
                "expert_weights": expert.weights_hash(),
            }
        ),
        "expert": str(expert_dir),
        # read back by pretraining into the checkpoint (an oracle is checked against it); none drawn: empty
        "randomisation": {k: list(v) for k, v in cfg.randomisation.items()} if dcfg.randomize else {},
    }
    shards = -(-dcfg.steps // dcfg.steps_per_shard)
    done = resume(out).next_shard if (out / "manifest.json").exists() else 0
    writer = ShardWriter(out, info, steps_per_shard=10**12, resume=done > 0)
    with writer, Progress() as progress:
        bar = progress.add_task(f"{cfg.task}: shards", total=shards, completed=done)
        for shard in range(done, shards):
            for arrays, params in generate_shard(cfg, dcfg, expert, shard, dcfg.steps_per_shard):
                writer.add_episode(arrays, params)
            writer.flush()
            progress.advance(bar)
    state = resume(out)
    return {"out": str(out), "shards": state.next_shard, "episodes": state.episodes, "steps": state.steps}
