"""`simdist expert train`: PPO experts (rsl-rl-lib) or the scripted peg expert, saved with checkpoints and critic.

The actor sees what a real robot has (proprio, command, and the Go2's gait clock); the critic sees privileged
simulator truth. Checkpoints are kept at configured iterations, from near-random to final, as the data recipe
mixes them in.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rsl_rl.runners import OnPolicyRunner

from simdist import robots
from simdist.config import config_hash
from simdist.experts.config import ExpertConfig
from simdist.experts.evaluate import evaluate
from simdist.experts.policy import SCHEMA_VERSION, ExpertPolicy, atomic_json, atomic_safetensors, build_mlp
from simdist.experts.rsl_env import RslVecEnv, obs_groups
from simdist.sim import make_env
from simdist.sim.config import TaskConfig

console = Console(stderr=True)
# Real-world profile of each task: the expert is also evaluated there (that gap is what adaptation must close).


def _manifest_base(cfg: TaskConfig, ecfg: ExpertConfig, preset: str, env: Any, kind: str) -> dict[str, Any]:
    groups = obs_groups(env)
    dims = {
        k: int(env.single_observation_space[k].shape[0])
        for k in sorted({*groups["actor"], *groups["critic"]})
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "task": cfg.task,
        "preset": preset,
        "config_hash": config_hash({"task": dataclasses.asdict(cfg), "expert": dataclasses.asdict(ecfg)}),
        "obs_groups": groups,
        "obs_dims": dims,
        "action_dim": env.action_dim,
        "actor_hidden": ecfg.actor_hidden,
        "critic_hidden": ecfg.critic_hidden,
        "activation": ecfg.activation,
        "action_scales": [cfg.peg.action_scale_m, cfg.peg.action_scale_rad],
    }


def _rsl_config(ecfg: ExpertConfig, groups: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "num_steps_per_env": ecfg.steps_per_env,
        "save_interval": 10**9,  # rsl-rl's own pickled saves are not used (train_ppo disables them too)
        "obs_groups": groups,
        "check_for_nan": True,
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": ecfg.learning_epochs,
            "num_mini_batches": ecfg.mini_batches,
            "clip_param": 0.2,
            "gamma": ecfg.gamma,
            "lam": ecfg.lam,
            "value_loss_coef": 1.0,
            "entropy_coef": ecfg.entropy_coef,
            "learning_rate": ecfg.learning_rate,
            "max_grad_norm": 1.0,
            "schedule": "adaptive",
            "desired_kl": ecfg.desired_kl,
        },
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": ecfg.actor_hidden,
            "activation": ecfg.activation,
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": ecfg.init_std},
        },
        "critic": {
            "class_name": "MLPModel",
            "hidden_dims": ecfg.critic_hidden,
            "activation": ecfg.activation,
            "obs_normalization": True,
        },
    }


def _quick_return(policy: ExpertPolicy, cfg: TaskConfig, episodes: int) -> float:
    return evaluate(policy.act, cfg, "sim", episodes)["mean_return"]


def train_ppo(
    cfg: TaskConfig, ecfg: ExpertConfig, preset: str, out: Path, log_dir: Path | None
) -> dict[str, Any]:
    torch.manual_seed(ecfg.seed)
    env = make_env(cfg, "sim", num_envs=ecfg.num_envs, seed=ecfg.seed, randomize=True)
    rsl_env = RslVecEnv(env)
    manifest = _manifest_base(cfg, ecfg, preset, env, "ppo")
    runner = OnPolicyRunner(
        rsl_env,
        _rsl_config(ecfg, manifest["obs_groups"]),
        log_dir=str(log_dir) if log_dir else None,
        device="cpu",
    )
    # The checkpoints are safetensors (below). rsl-rl pickles the whole runner at the end of every learn() call
    # when it logs, one call per 10 iterations here (135 MB per expert), so its save is switched off.
    runner.save = lambda *args, **kwargs: None
    marks = sorted({c for c in ecfg.checkpoints if c < ecfg.iterations})
    entries: list[dict[str, Any]] = []
    start, it = time.monotonic(), 0
    quick = max(6, ecfg.eval_episodes // 10)

    def save(name: str) -> dict[str, Any]:
        file = f"policy_{name}.safetensors"
        atomic_safetensors(out / file, runner.alg.actor.state_dict())
        policy = ExpertPolicy(manifest, name, model=runner.alg.actor)
        runner.alg.actor.eval()
        entry = {
            "name": name,
            "file": file,
            "iteration": it,
            "eval_return": _quick_return(policy, cfg, quick),
        }
        runner.alg.train_mode()
        return entry

    budget_s = ecfg.max_minutes * 60
    while it < ecfg.iterations and time.monotonic() - start < budget_s:
        if it in marks:
            entries.append(save(f"{it:05d}"))
            console.print(f"[{cfg.task}] iteration {it}: checkpoint, return {entries[-1]['eval_return']:.2f}")
        next_stop = min([m for m in marks if m > it] + [ecfg.iterations, it + 10])
        runner.learn(next_stop - it)
        it = next_stop
        # rsl-rl leaves its count at the chunk's last iteration; set, the next chunk's TensorBoard steps go on
        runner.current_learning_iteration = it
    final = save("final")
    atomic_safetensors(out / "critic.safetensors", runner.alg.critic.state_dict())
    manifest.update(
        checkpoints=entries,
        final=final,
        critic="critic.safetensors",
        iterations=it,
        train_minutes=(time.monotonic() - start) / 60,
    )
    env.close()
    return manifest


def train_scripted_peg(cfg: TaskConfig, ecfg: ExpertConfig, preset: str, out: Path) -> dict[str, Any]:
    """The force-guided search controller as expert (no privileged state); checkpoints are degraded versions;
    the critic (on privileged observations) is fitted to Monte-Carlo returns."""
    start = time.monotonic()
    env = make_env(cfg, "sim", num_envs=ecfg.num_envs, seed=ecfg.seed, randomize=True)
    manifest = _manifest_base(cfg, ecfg, preset, env, "scripted")
    levels = [{"gain": 0.5 * f, "noise": 0.6 * (1 - f)} for f in (0.1, 0.3, 0.5, 0.7, 0.9)]
    entries = []
    for k, level in enumerate(levels):
        policy = ExpertPolicy(manifest, f"level{k}", level=level, rng=np.random.default_rng(k))
        entries.append(
            {
                "name": f"level{k}",
                "level": level,
                "iteration": k,
                "eval_return": _quick_return(policy, cfg, max(6, ecfg.eval_episodes // 10)),
            }
        )
    final_level = {"gain": 0.5, "noise": 0.0}
    final_policy = ExpertPolicy(manifest, "final", level=final_level)
    # Critic: the final expert's discounted returns on privileged observations (see fit_critic).
    rollout = CriticRollout()
    obs, _ = env.reset(seed=ecfg.seed)
    steps = cfg.episode_steps * 3
    for t in range(steps):
        before = {k: obs[k].copy() for k in manifest["obs_dims"]}
        obs, reward, terminated, truncated, info = env.step(final_policy.act(obs))
        # where an episode was cut (a time-out, or the rollout's end), the state its return continues from
        cut = ~terminated if t == steps - 1 else truncated & ~terminated
        last = info.get("final_obs", obs)
        rollout.add(before, reward, terminated, cut, {k: last[k][cut] for k in manifest["obs_dims"]})
    critic, loss = fit_critic(manifest, rollout, ecfg.gamma, ecfg.critic_fit_steps, ecfg.seed)
    atomic_safetensors(out / "critic.safetensors", critic.state_dict())
    manifest["actor"] = distil_scripted_actor(cfg, ecfg, manifest, final_policy, out)
    final = {
        "name": "final",
        "level": final_level,
        "iteration": len(levels),
        "eval_return": _quick_return(final_policy, cfg, max(6, ecfg.eval_episodes // 10)),
    }
    manifest.update(
        checkpoints=entries,
        final=final,
        critic="critic.safetensors",
        iterations=len(levels),
        critic_fit_mse=loss,
        train_minutes=(time.monotonic() - start) / 60,
    )
    env.close()
    return manifest


class CriticRollout:
    """Steps of a vectorised rollout for `fit_critic`: observations, rewards, terminations, and where an episode
    was cut without terminating (a time-out, the rollout's end) the observation it would have continued from."""

    def __init__(self) -> None:
        self.obs: list[dict[str, np.ndarray]] = []
        self.reward: list[np.ndarray] = []
        self.terminated: list[np.ndarray] = []
        self.cut: list[np.ndarray] = []
        self.cut_obs: list[dict[str, np.ndarray]] = []

    def add(self, obs, reward, terminated, cut, cut_obs) -> None:  # type: ignore[no-untyped-def]
        self.obs.append(obs)
        self.reward.append(np.asarray(reward, dtype=np.float32))
        self.terminated.append(np.asarray(terminated, dtype=bool))
        self.cut.append(np.asarray(cut, dtype=bool))
        self.cut_obs.append(cut_obs)


def fit_critic(
    manifest: dict[str, Any], rollout: CriticRollout, gamma: float, fit_steps: int, seed: int, rounds: int = 4
) -> tuple[torch.nn.Module, float]:
    """A critic regressed onto the rollout's discounted returns: a termination ends a return; a cut (time-out)
    does not, it is bootstrapped with the critic's own value of the state the episode would have continued
    from, refitted `rounds` times. (A critic without a clock cannot predict a return that a time-out cut short:
    zeroing it there taught it the time left, which it never sees.) Returns the critic and its last batch MSE."""
    from tensordict import TensorDict

    keys = list(manifest["obs_dims"])

    def as_inputs(parts: list[dict[str, np.ndarray]]) -> TensorDict:
        data = {k: torch.as_tensor(np.concatenate([p[k] for p in parts]), dtype=torch.float32) for k in keys}
        return TensorDict(data, batch_size=[len(data[keys[0]])])

    inputs = as_inputs(rollout.obs)
    cut_inputs = as_inputs(rollout.cut_obs)
    critic = build_mlp(manifest, "critic")
    critic.update_normalization(inputs)
    optim = torch.optim.Adam(critic.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    loss = torch.zeros(())
    for r in range(rounds):
        with torch.no_grad():
            boot = (
                critic(cut_inputs)[:, 0].numpy() if r > 0 and len(cut_inputs) else np.zeros(len(cut_inputs))
            )
        returns = np.zeros_like(rollout.reward[0])
        targets, used = [], len(boot)
        for reward, terminated, cut in zip(
            reversed(rollout.reward), reversed(rollout.terminated), reversed(rollout.cut), strict=True
        ):
            used -= int(cut.sum())
            follow = returns.copy()
            follow[cut] = boot[used : used + int(cut.sum())]
            returns = reward + gamma * follow * ~terminated
            targets.append(returns.copy())
        target = torch.as_tensor(np.concatenate(targets[::-1]), dtype=torch.float32)
        for _ in range(max(1, fit_steps // rounds)):
            idx = torch.randint(len(target), (256,), generator=gen)
            loss = torch.mean((critic(inputs[idx])[:, 0] - target[idx]) ** 2)
            optim.zero_grad()
            loss.backward()
            optim.step()
    critic.eval()
    return critic, float(loss.detach())


def distil_scripted_actor(
    cfg: TaskConfig, ecfg: ExpertConfig, manifest: dict[str, Any], policy: ExpertPolicy, out: Path
) -> dict[str, Any]:
    """Fit the scripted expert's actor network (simdist.experts.distil) and save it; its manifest entry."""
    from simdist.experts.distil import distil_actor

    actor, stats = distil_actor(
        cfg,
        manifest,
        policy.act,
        num_envs=ecfg.num_envs,
        rounds=ecfg.distil_rounds,
        fit_steps=ecfg.distil_fit_steps,
        action_std=ecfg.distil_action_std,
        seed=ecfg.seed,
    )
    atomic_safetensors(out / "actor_distilled.safetensors", actor.state_dict())
    quick = max(6, ecfg.eval_episodes // 10)
    network = ExpertPolicy(manifest, "distilled", model=actor)
    return {"file": "actor_distilled.safetensors", "eval_return": _quick_return(network, cfg, quick), **stats}


def _scripted(cfg: TaskConfig, ecfg: ExpertConfig) -> bool:
    """The expert is the robot's scripted controller (the peg's search), not PPO."""
    return ecfg.peg_expert == "scripted" and robots.get(cfg.robot).scripted_expert(cfg) is not None


def train_expert(
    cfg: TaskConfig, ecfg: ExpertConfig, preset: str, out: Path, log_dir: Path | None = None
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # small networks beside the simulator: a second thread costs more than it gives
    if _scripted(cfg, ecfg):
        manifest = train_scripted_peg(cfg, ecfg, preset, out)
    else:
        manifest = train_ppo(cfg, ecfg, preset, out, log_dir)
    atomic_json(out / "manifest.json", manifest)  # written first without figures: the expert is usable
    from simdist.experts.policy import Expert

    expert = Expert(out)
    manifest["evaluation"] = {
        profile: evaluate(expert.final.act, cfg, profile, ecfg.eval_episodes)
        for profile in dict.fromkeys(("sim", cfg.real_profile))
    }
    atomic_json(out / "manifest.json", manifest)
    return manifest


def untrained_expert(cfg: TaskConfig, ecfg: ExpertConfig, out: Path) -> Path:
    """An expert folder with freshly initialised networks (same inference cost as a trained one), for benchmarks."""
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(ecfg.seed)
    env = make_env(cfg, "sim", num_envs=1, seed=ecfg.seed)
    kind = "scripted" if _scripted(cfg, ecfg) else "ppo"
    manifest = _manifest_base(cfg, ecfg, "untrained", env, kind)
    env.close()
    atomic_safetensors(out / "critic.safetensors", build_mlp(manifest, "critic").state_dict())
    if kind == "scripted":
        final: dict[str, Any] = {"name": "final", "level": {"gain": 0.5, "noise": 0.0}, "iteration": 0}
        checkpoints = [{"name": "level0", "level": {"gain": 0.25, "noise": 0.3}, "iteration": 0}]
    else:
        atomic_safetensors(out / "policy_final.safetensors", build_mlp(manifest, "actor").state_dict())
        final = {"name": "final", "file": "policy_final.safetensors", "iteration": 0}
        checkpoints = [dict(final, name="00000")]
    manifest.update(checkpoints=checkpoints, final=final, critic="critic.safetensors", iterations=0)
    atomic_json(out / "manifest.json", manifest)
    return out
