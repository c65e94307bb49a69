"""Each robot's description agrees with its env and with what the layers derive from it."""

from __future__ import annotations

import numpy as np
import pytest

from simdist import robots
from simdist.bags import schema
from simdist.sim import make_env


@pytest.mark.parametrize("task", ["go2_slope", "ur5e_peg"])
def test_the_description_states_the_env_s_sizes_and_the_bag_topics(task: str) -> None:
    env = make_env(task, "sim", num_envs=1)
    env.reset(seed=0)
    robot = robots.get(env.cfg.robot)
    try:
        assert type(env) is robot.env_class()
        assert (robot.proprio_dim, robot.action_dim, robot.command_dim) == (
            env.proprio_dim,
            env.action_dim,
            env.command_dim,
        )
        assert len(robot.joint_names) == len(
            env.measure(0, lambda k, s: np.zeros(s), timestamp=0.0, robot_time=0.0).joint_names
        )
        assert robot.evaluation(env.cfg).metric_key in env.metrics()
    finally:
        env.close()
    assert schema.robot_topics("go2") == (schema.JOINT_STATES, schema.IMU)
    assert schema.robot_topics("ur5e") == (schema.JOINT_STATES, schema.WRENCH, schema.EE_POSE)


def test_a_hold_is_the_robot_s_own() -> None:
    last = np.arange(12, dtype=np.float32)
    assert robots.get("go2").hold_action(last, 12).tolist() == last.tolist()  # repeat the joint targets
    assert robots.get("go2").hold_action(None, 12).tolist() == [0.0] * 12
    assert robots.get("ur5e").hold_action(np.ones(4), 4).tolist() == [0.0] * 4  # move the tool by zero


def test_the_peg_flange_quaternion_keeps_one_sign_through_an_insertion():
    """With the tool pointing down the flange quaternion's w is about 0, so "w >= 0" flipped x, y and z (values near
    +-1) at random from step to step; signed into the tool-down hemisphere, the sign never changes, on the env's
    observation and on what the robot's driver reports alike."""
    from simdist import robots
    from simdist.robots.ur5e import FLANGE_DOWN, flange_quat
    from simdist.sim import make_env

    env = make_env("ur5e_peg", "sim", num_envs=4, seed=1)
    expert = robots.get("ur5e").scripted_expert(env.cfg)
    obs, _ = env.reset(seed=1)
    quats = []
    for _ in range(80):
        obs, *_ = env.step(expert(obs))
        quats.append(obs["proprio"][:, 15:19].copy())
    quats = np.array(quats)
    assert np.abs(quats[..., 0]).max() < 0.1  # the tool down: w is about 0, where "w >= 0" flips
    assert (quats @ FLANGE_DOWN > 0.5).all()  # one hemisphere throughout, noise included
    flipped = flange_quat(-quats.reshape(-1, 4))  # the driver's report, either sign: the same quaternion
    np.testing.assert_allclose(flipped, quats.reshape(-1, 4), atol=1e-6)
