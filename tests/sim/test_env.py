"""Vector env behaviour: determinism, automatic reset, bad actions, instability, observation layout."""

import numpy as np
import pytest

from simdist.sim import make_env


def _rollout(task: str, seed: int, steps: int, n: int = 3) -> list[np.ndarray]:
    env = make_env(task, "sim", num_envs=n, seed=seed, randomize=True)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(123)
    out = [obs["proprio"].copy()]
    for _ in range(steps):
        obs, reward, *_ = env.step(rng.uniform(-1, 1, (n, env.action_dim)))
        out += [obs["proprio"].copy(), reward.copy()]
    return out


@pytest.mark.parametrize("task", ["go2_slope", "ur5e_peg"])
def test_same_seed_same_trajectory(task):
    a, b = _rollout(task, 7, 6), _rollout(task, 7, 6)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    c = _rollout(task, 8, 6)
    assert not np.array_equal(a[-2], c[-2])


def test_observation_layout():
    env = make_env("go2_slope", "sim", num_envs=2, seed=0)
    obs, _ = env.reset()
    assert obs["proprio"].shape == (2, 35) and obs["command"].shape == (2, 3)
    assert obs["privileged"].shape == (2, env.privileged_dim)
    assert env.single_observation_space["proprio"].shape == (35,)
    # standing still: gravity mostly along -z of the body, joint offsets near the standing pose
    assert obs["proprio"][0, 5] < -0.9
    assert np.abs(obs["proprio"][:, 6:18]).max() < 0.3
    peg = make_env("ur5e_peg", "sim", num_envs=2, seed=0)
    obs, _ = peg.reset()
    assert obs["proprio"].shape == (2, 31) and obs["command"].shape == (2, 4)
    # the command is the hole estimate: within a few centimetres of the true hole, never exactly it
    err = np.abs(obs["command"][:, :2] - peg.hole_pose[:, :2])
    assert (err < 0.02).all() and (err > 0).all()


def test_automatic_reset_same_step():
    env = make_env("go2_foam", "sim", num_envs=2, seed=0, overrides={"episode_seconds": 0.1})
    obs, info = env.reset()
    first_ids = info["episode_id"].copy()
    for _ in range(5):
        obs, _, terminated, truncated, info = env.step(np.zeros((2, 12)))
    assert env.cfg.episode_steps == 5
    assert truncated.all() and not terminated.any()
    assert "final_obs" in info and info["final_obs"]["proprio"].shape == (2, 35)
    assert (env.episode_ids != first_ids).all()
    assert (env.steps == 0).all()  # already reset: the returned observation starts the next episode
    assert set(env.episode_ids) == {2, 3}


def test_bad_actions_are_sanitised_and_counted():
    env = make_env("go2_slope", "sim", num_envs=3, seed=0)
    env.reset()
    actions = np.zeros((3, 12))
    actions[0, 3] = np.nan
    actions[1, 0] = 1e9
    obs, reward, *_, info = env.step(actions)
    assert info["nonfinite_actions"] == 1 and info["clipped_actions"] == 1
    assert np.isfinite(obs["proprio"]).all() and np.isfinite(reward).all()
    np.testing.assert_allclose(env.last_action[0], 0.0)
    assert env.last_action[1, 0] == env.cfg.action_clip


def test_unstable_member_is_reset_and_reported():
    env = make_env("go2_slope", "sim", num_envs=2, seed=0)
    env.reset()
    env.datas[1].qvel[:] = 1e12  # blow up member 1 only
    obs, _, terminated, truncated, info = env.step(np.zeros((2, 12)))
    assert info["unstable"].tolist() == [False, True]
    assert truncated[1] and not truncated[0]
    assert info["unstable_resets"] == 1
    assert np.isfinite(obs["proprio"]).all() and np.isfinite(env.datas[1].qpos).all()


def test_eval_commands_cycle_the_three_speeds():
    env = make_env("go2_slope", "ptfe", num_envs=3, seed=0, eval_commands=True)
    obs, _ = env.reset()
    np.testing.assert_allclose(obs["command"][:, 0], [0.3, 0.5, 0.7], atol=1e-6)


def test_randomisation_draws_inside_ranges_and_profile_is_outside():
    env = make_env("go2_slope", "sim", num_envs=16, seed=0, randomize=True)
    env.reset()
    low, high = env.cfg.randomisation["friction"]
    assert (env.params["friction"] >= low).all() and (env.params["friction"] <= high).all()
    assert env.params["friction"].std() > 0.1
    assert set(np.unique(env.params["latency_steps"])) <= {0.0, 1.0}
    ptfe = make_env("go2_slope", "ptfe", num_envs=2, seed=0)
    ptfe.reset()
    assert (ptfe.params["friction"] == 0.15).all() and 0.15 < low
    assert ptfe.models[0].geom_friction[ptfe._ground, 0] == pytest.approx(0.15)
    assert (ptfe.params["latency_steps"] == 2).all()  # outside the drawn 0-1


def test_camera_observation():
    env = make_env("ur5e_peg", "sim", num_envs=2, seed=0, overrides={"camera.enabled": True})
    obs, _ = env.reset()
    image = obs["image"]
    assert image.shape == (2, 64, 64, 3) and image.dtype == np.uint8
    assert image.std() > 5  # a scene, not a blank frame
    env.close()


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 4, 6])
def test_an_action_reaches_the_motors_exactly_latency_steps_later(steps: int) -> None:
    """The profile's latency is what it says at any length (the queue once held 3 and cut `ptfe`'s 4 steps to 2)."""
    env = make_env("go2_slope", "sim", num_envs=2, seed=0, overrides={"nominal.latency_steps": steps})
    env.reset()
    assert (env.params["latency_steps"] == steps).all()
    applied = []
    for k in range(steps + 3):
        action = np.full((2, env.action_dim), float(k + 1), dtype=np.float32)
        applied.append(env._delayed(action)[:, 0].copy())
    # before the first action arrives the motors get what the reset queue holds (zeros), then each k-th action
    expected = [0.0] * steps + [float(k + 1) for k in range(3)]
    np.testing.assert_array_equal(np.array(applied)[:, 0], expected)
    np.testing.assert_array_equal(np.array(applied)[:, 1], expected)
