"""Experts: a real (tiny) PPO learning test, the scripted peg expert, checkpoint files and manifest."""

import json

import numpy as np
import pytest
import torch

from simdist.errors import CheckpointError
from simdist.experts.config import load_expert_config
from simdist.experts.evaluate import evaluate
from simdist.experts.policy import Expert
from simdist.experts.train import train_expert
from simdist.sim import load_task, make_env


@pytest.fixture(scope="module")
def tiny_go2_expert(tmp_path_factory):
    out = tmp_path_factory.mktemp("expert_go2")
    ecfg = load_expert_config("tiny", {"iterations": 12, "checkpoints": [0, 5], "eval_episodes": 6})
    train_expert(load_task("go2_foam"), ecfg, "tiny", out, log_dir=out / "tensorboard")
    return out


def test_ppo_logs_each_iteration_once_and_pickles_nothing(tiny_go2_expert):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert not list(
        tiny_go2_expert.rglob("*.pt")
    )  # the checkpoints are safetensors; rsl-rl's pickles are off
    steps = []
    for events in sorted((tiny_go2_expert / "tensorboard").glob("events.*")):  # one file per learn() call
        log = EventAccumulator(str(events))
        log.Reload()
        tag = next(t for t in log.Tags()["scalars"] if t.startswith("Loss/"))
        steps += [e.step for e in log.Scalars(tag)]
    assert sorted(steps) == list(range(12)), steps


def test_tiny_ppo_improves_over_its_random_start(tmp_path):
    """A real learning test: PPO on the peg task (dense reward) beats its own random initial policy."""
    cfg = load_task("ur5e_peg")
    ecfg = load_expert_config(
        "tiny", {"peg_expert": "ppo", "iterations": 20, "checkpoints": [0], "eval_episodes": 4}
    )
    train_expert(cfg, ecfg, "tiny", tmp_path)
    expert = Expert(tmp_path)
    start = evaluate(expert.policies[0].act, cfg, "sim", 16, seed=3)["mean_return"]
    final = evaluate(expert.final.act, cfg, "sim", 16, seed=3)["mean_return"]
    assert final > start + 30.0, (start, final)


def test_manifest_and_checkpoints(tiny_go2_expert):
    manifest = json.loads((tiny_go2_expert / "manifest.json").read_text())
    assert (
        manifest["task"] == "go2_foam" and manifest["preset"] == "tiny" and len(manifest["config_hash"]) == 16
    )
    assert [c["iteration"] for c in manifest["checkpoints"]] == [0, 5]
    assert manifest["final"]["iteration"] == 12
    assert manifest["obs_groups"]["actor"] == ["proprio", "command", "clock"]
    assert "privileged" in manifest["obs_groups"]["critic"]
    assert set(manifest["evaluation"]) == {"sim", "foam"}
    for entry in [*manifest["checkpoints"], manifest["final"]]:
        assert (tiny_go2_expert / entry["file"]).is_file() and np.isfinite(entry["eval_return"])
    expert = Expert(tiny_go2_expert)
    obs = {
        "proprio": np.zeros((2, 35), np.float32),
        "command": np.zeros((2, 3), np.float32),
        "clock": np.zeros((2, 2), np.float32),
        "privileged": np.zeros((2, 52), np.float32),
    }
    a0, a1 = expert.policies[0].act(obs), expert.final.act(obs)
    assert a0.shape == (2, 12) and not np.allclose(a0, a1)  # checkpoints differ from the final policy
    assert expert.value(obs).shape == (2,)


def test_corrupt_expert_is_refused(tiny_go2_expert, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_go2_expert, broken)
    (broken / "critic.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(CheckpointError, match="critic.safetensors"):
        Expert(broken)
    with pytest.raises(CheckpointError, match="manifest.json is missing"):
        Expert(tmp_path / "nothing")


def test_scripted_peg_expert(tmp_path):
    manifest = train_expert(load_task("ur5e_peg"), load_expert_config("tiny"), "tiny", tmp_path)
    assert manifest["kind"] == "scripted"
    assert manifest["evaluation"]["sim"]["success_rate"] >= 0.75
    returns = [c["eval_return"] for c in manifest["checkpoints"]]
    assert returns[0] < manifest["final"]["eval_return"]  # the most degraded level is clearly worse
    expert = Expert(tmp_path)
    assert len(expert.policies) == 5
    # the distilled actor network imitates the controller on states of the controller's own rollouts
    network = expert.network()
    assert network is not None and manifest["actor"]["file"] == "actor_distilled.safetensors"
    assert torch.allclose(network.model.distribution.std_param, torch.tensor(0.1))
    env = make_env("ur5e_peg", "sim", num_envs=8, seed=3, randomize=True)
    obs, _ = env.reset(seed=3)
    target, imitated = [], []
    for _ in range(60):
        target.append(expert.final.act(obs))
        imitated.append(network.act(obs))
        obs, *_ = env.step(target[-1])
    target, imitated = np.concatenate(target), np.concatenate(imitated)
    mse, var = np.mean((imitated - target) ** 2), np.var(target, axis=0).mean()
    assert mse < 0.5 * var, f"the actor did not fit: mse {mse:.4f}, variance {var:.4f}"
    # the RL-finetuning baseline resumes PPO from exactly that network
    from safetensors.torch import load_file

    from simdist.experiment.rl import RlFinetuner

    tuner = RlFinetuner.create(
        load_task("ur5e_peg"), "real", tmp_path, expert_preset="tiny", num_envs=2, steps_per_env=4, seed=0
    )
    saved = load_file(str(tmp_path / "actor_distilled.safetensors"))
    assert all(torch.equal(tuner.actor_state()[k], v) for k, v in saved.items())
    assert tuner.train(8) == 1 and tuner.env.env_steps == 8
    assert not torch.equal(tuner.actor_state()["mlp.0.weight"], saved["mlp.0.weight"])
    tuner.close()


def test_evaluation_takes_each_members_episodes_in_rounds_not_in_the_order_they_finish():
    """A third of the members (those commanded 0.7 m/s) throw their joints to a limit and fall at once, the rest
    stand: the fall rate is a third however many episodes are counted, not the share of the falls that finish
    first."""

    def policy(obs):
        actions = np.zeros((len(obs["command"]), 12), np.float32)
        actions[obs["command"][:, 0] > 0.6] = 4.0
        return actions

    cfg = load_task("go2_foam", {"episode_seconds": 2.0})
    for episodes in (12, 24):  # one round of 12 members, then two
        result = evaluate(policy, cfg, "sim", episodes, seed=10000, num_envs=12)
        assert result["fall_rate"] == pytest.approx(1 / 3), (episodes, result)


@pytest.mark.parametrize("ending", ["time-out", "termination"])
def test_the_scripted_experts_critic_bootstraps_time_outs_and_ends_terminations(ending):
    """Reward 1 every step, 20-step episodes, gamma 0.9, and a critic without a clock: where episodes time out the
    return goes on (10 = 1 / (1 - 0.9)); where they terminate it ends (6.1, the mean of the returns to the end).
    Zeroing the return at a time-out taught the critic the time left, which it cannot see."""
    from simdist.experts.train import CriticRollout, fit_critic

    manifest = {
        "obs_groups": {"critic": ["privileged"]},
        "obs_dims": {"privileged": 3},
        "critic_hidden": [32, 32],
        "activation": "elu",
    }
    rng = np.random.default_rng(0)
    rollout, envs, length = CriticRollout(), 16, 20
    for t in range(3 * length):
        end = (t + 1) % length == 0
        obs = {"privileged": rng.normal(size=(envs, 3)).astype(np.float32)}
        terminated = np.full(envs, end and ending == "termination")
        cut = np.full(envs, (end and ending == "time-out") or t == 3 * length - 1) & ~terminated
        last = {"privileged": rng.normal(size=(int(cut.sum()), 3)).astype(np.float32)}
        rollout.add(obs, np.ones(envs), terminated, cut, last)
    torch.manual_seed(0)
    critic, _ = fit_critic(manifest, rollout, 0.9, 2000, seed=0)
    from tensordict import TensorDict

    probe = TensorDict({"privileged": torch.randn(256, 3)}, batch_size=[256])
    with torch.no_grad():
        value = float(critic(probe).mean())
    if ending == "time-out":
        assert value > 9.0, value
    else:
        assert 5.3 < value < 6.9, value
