"""RobotState -> proprio gives exactly the env's clean proprio; the history pads like the training windows."""

from __future__ import annotations

import numpy as np
import pytest

from simdist import robots
from simdist.data.dataset import InMemoryEpisodes
from simdist.data.windows import WindowSampler
from simdist.hardware.sim_robot import SimRobot
from simdist.runtime.history import ObservationHistory


@pytest.mark.parametrize("task", ["go2_slope", "ur5e_peg"])
def test_state_to_proprio_equals_the_env_clean_proprio(task: str) -> None:
    robot = SimRobot(task, "sim", seed=3, overrides={"nominal.sensor_noise_scale": 0})
    rng = np.random.default_rng(0)
    try:
        for _ in range(12):  # includes contact-rich steps and, for the Go2, usually a fall and reset
            vector = robots.get(robot.robot).proprio(robot.read())
            expected = robot._obs["proprio"][0]
            assert vector.dtype == np.float32 and vector.shape == (robots.get(robot.robot).proprio_dim,)
            np.testing.assert_array_equal(vector, expected)
            robot.send_action(rng.normal(0.0, 0.7, robot.action_dim))
    finally:
        robot.stop()


def test_sensor_noise_reaches_the_state() -> None:
    robot = SimRobot("go2_slope", "sim", seed=1)
    vector = robots.get("go2").proprio(robot.read())
    clean = robot._obs["proprio"][0]
    assert not np.array_equal(vector, clean)  # the robot's own noise, drawn like the env's
    assert np.abs(vector - clean)[:3].max() < 0.5  # gyro noise std 0.05
    robot.stop()


def test_missing_fields_are_named() -> None:
    from simdist.hardware.state import RobotState

    state = RobotState(timestamp=0.0, joint_positions=np.zeros(12), joint_velocities=np.zeros(12))
    with pytest.raises(ValueError, match="imu_quaternion"):
        robots.get("go2").proprio(state)


def test_history_inputs_equal_window_history_with_start_padding() -> None:
    rng = np.random.default_rng(0)
    n, h, t_max, o, a = 9, 4, 3, 5, 2
    episode = {
        "proprio": rng.normal(size=(n, o)).astype(np.float32),
        "action": rng.normal(size=(n, a)).astype(np.float32),
        "command": np.zeros((n, 1), np.float32),
        "reward": np.zeros(n, np.float32),
        "value": np.zeros(n, np.float32),
        "expert_flag": np.zeros(n, bool),
    }
    sampler = WindowSampler(InMemoryEpisodes([episode]), h, t_max)
    history = ObservationHistory(h, o, a)
    for t in range(n - 1):
        history.push(episode["proprio"][t])
        window = sampler.windows(np.array([t]))
        obs_hist, act_hist, mask, obs = history.arrays()
        np.testing.assert_array_equal(obs_hist, window.obs_hist[0].numpy())
        np.testing.assert_array_equal(act_hist, window.act_hist[0].numpy())
        np.testing.assert_array_equal(mask, window.hist_mask[0].numpy())
        np.testing.assert_array_equal(obs, window.obs[0].numpy())
        history.record(episode["action"][t])
    with pytest.raises(RuntimeError):
        history.record(episode["action"][0])  # one action per observation


@pytest.mark.parametrize("task", ["go2_foam", "ur5e_peg"])
def test_each_ended_episode_reports_the_task_reward_summed_over_its_steps(task: str) -> None:
    robot = SimRobot(task, "sim", seed=2, overrides={"episode_seconds": 0.3})
    rng = np.random.default_rng(1)
    sums, running = [], 0.0
    try:
        for _ in range(3 * robot.cfg.episode_steps + 2):
            robot.send_action(rng.normal(0.0, 0.5, robot.action_dim))
            reward = robot.read().reward  # the latest step's reward, which the bag records
            assert reward is not None and np.isfinite(reward)
            running += reward
            if (ended := robot.take_episode_end()) is not None:
                sums.append((running, ended["return"]))
                running = 0.0
    finally:
        robot.stop()
    assert len(sums) >= 3
    for expected, reported in sums:
        assert reported == pytest.approx(expected, rel=1e-9, abs=1e-12)
