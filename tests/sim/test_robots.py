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
