"""RobotState -> the model's proprio vector, exactly the layout of the simulator's `proprio` for each robot.

This is the only place that knows how a measurement becomes an observation on the robot side; the layouts are
documented in `simdist.sim.go2` and `simdist.sim.ur5e`, and tests check that a SimRobot's state (sensor noise
off) gives the env's clean proprio bit for bit. Only numpy and MuJoCo's quaternion helpers are used, so nothing
here imports the simulator.
"""

from __future__ import annotations

from collections.abc import Callable

import mujoco
import numpy as np

from simdist.hardware.state import RobotState

# The Go2's standing pose (rad, Unitree order), the zero of the joint-position observation and of the actions.
# Must equal simdist.sim.go2.STAND_POSE (a test checks it); kept here so the robot side never imports the sim.
GO2_STAND_POSE = np.array([0.0, 0.9, -1.8] * 4)
GRAVITY = 9.81  # m/s^2, as the env subtracts it from the vertical specific force

PROPRIO_DIMS: dict[str, int] = {"go2": 35, "ur5e": 31}


def _require(state: RobotState, robot: str, *names: str) -> None:
    missing = [n for n in names if getattr(state, n) is None]
    if missing:
        raise ValueError(f"{robot} proprio needs {', '.join(missing)} in the RobotState")


def go2_proprio(state: RobotState) -> np.ndarray:
    """(35,) float32: gyro, projected gravity, joint pos - stand, joint vel, foot forces, accel_z - g."""
    _require(state, "go2", "imu_quaternion", "imu_gyro", "imu_accel", "foot_forces")
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(state.imu_quaternion, dtype=np.float64))
    gravity = -rot.reshape(3, 3)[2, :]  # world -z in the body frame: R^T (0, 0, -1)
    parts = (
        state.imu_gyro,
        gravity,
        state.joint_positions - GO2_STAND_POSE,
        state.joint_velocities,
        state.foot_forces,
        np.asarray(state.imu_accel)[2:3] - GRAVITY,
    )
    return np.concatenate(parts).astype(np.float32)


def ur5e_proprio(state: RobotState) -> np.ndarray:
    """(31,) float32: joint pos, joint vel, tool (peg tip) position, flange quaternion (w >= 0), tool twist, wrench."""
    _require(state, "ur5e", "tool_pose", "tool_twist", "tool_wrench")
    pose = np.asarray(state.tool_pose, dtype=np.float64)
    quat = pose[3:7] * (-1.0 if pose[3] < 0 else 1.0)  # q and -q are one rotation; the env keeps w >= 0
    parts = (
        state.joint_positions,
        state.joint_velocities,
        pose[:3],
        quat,
        state.tool_twist,
        state.tool_wrench,
    )
    return np.concatenate(parts).astype(np.float32)


PROPRIO: dict[str, Callable[[RobotState], np.ndarray]] = {"go2": go2_proprio, "ur5e": ur5e_proprio}


def proprio_from_state(robot: str, state: RobotState) -> np.ndarray:
    """The proprio vector of `robot` ("go2" or "ur5e") for one measurement.

    Raises:
        ValueError: unknown robot, or a field the layout needs is missing from the state.
    """
    if robot not in PROPRIO:
        raise ValueError(f"unknown robot '{robot}' (valid: {', '.join(PROPRIO)})")
    return PROPRIO[robot](state)
