"""What a robot reports (`RobotState`) and what it is told (`JointCommand`), in SI units and plain numpy arrays.

Quaternions are (w, x, y, z), as MuJoCo and Unitree write them; conversions to ROS messages reorder them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


def _vector(value: object, name: str, size: int | None = None) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if size is not None and array.shape != (size,):
        raise ValueError(f"{name} must have {size} values, got {array.shape[0]}")
    return array


@dataclass
class RobotState:
    """One timestamped measurement of a robot; fields a robot does not measure stay None.

    `timestamp` is the host's `time.monotonic()` (s) when the measurement arrived, so that staleness can be judged
    against the control loop's clock; the robot's own clock, where it has one, is `robot_time`.
    """

    timestamp: float
    joint_positions: np.ndarray  # rad
    joint_velocities: np.ndarray  # rad/s
    joint_torques: np.ndarray | None = None  # N m, measured or estimated
    imu_quaternion: np.ndarray | None = None  # (w, x, y, z), body in world
    imu_gyro: np.ndarray | None = None  # rad/s, body frame
    imu_accel: np.ndarray | None = None  # m/s^2, body frame, gravity included
    foot_forces: np.ndarray | None = None  # Go2: FR, FL, RR, RL, sensor units (not calibrated to N)
    tool_pose: np.ndarray | None = None  # (x, y, z, qw, qx, qy, qz) in the base frame, m
    tool_twist: np.ndarray | None = None  # (vx, vy, vz, wx, wy, wz), m/s and rad/s
    tool_wrench: np.ndarray | None = None  # (fx, fy, fz, tx, ty, tz), N and N m
    joint_names: tuple[str, ...] = ()
    robot_time: float | None = None  # s, the robot controller's clock
    # The task reward of the robot's latest control step (earned by the command in force over the period that ended
    # at or before this measurement), where the robot side computes one (the simulated robot does); else None.
    reward: float | None = None

    def __post_init__(self) -> None:
        self.joint_positions = _vector(self.joint_positions, "joint_positions")
        n = self.joint_positions.shape[0]
        self.joint_velocities = _vector(self.joint_velocities, "joint_velocities", n)
        if self.joint_torques is not None:
            self.joint_torques = _vector(self.joint_torques, "joint_torques", n)
        for name, size in (
            ("imu_quaternion", 4),
            ("imu_gyro", 3),
            ("imu_accel", 3),
            ("tool_pose", 7),
            ("tool_twist", 6),
            ("tool_wrench", 6),
        ):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, _vector(value, name, size))
        if self.foot_forces is not None:
            self.foot_forces = _vector(self.foot_forces, "foot_forces")
        if self.joint_names and len(self.joint_names) != n:
            raise ValueError(f"joint_names has {len(self.joint_names)} names for {n} joints")
        self.joint_names = tuple(self.joint_names)

    @property
    def num_joints(self) -> int:
        return int(self.joint_positions.shape[0])

    def is_finite(self) -> bool:
        """True when every measured value is finite (a NaN from a driver must not reach the planner)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray) and not np.all(np.isfinite(value)):
                return False
        return bool(np.isfinite(self.timestamp))


@dataclass
class JointCommand:
    """Joint position targets with optional PD gains and feed-forward torque, one entry per joint.

    Gains left None mean "the adapter's defaults" (the Go2 motor drivers' Kp 25, Kd 0.5); the UR5e ignores them
    because its controller servos positions itself.
    """

    joint_targets: np.ndarray  # rad
    kp: np.ndarray | None = None  # N m / rad
    kd: np.ndarray | None = None  # N m s / rad
    torque_ff: np.ndarray | None = None  # N m

    def __post_init__(self) -> None:
        self.joint_targets = _vector(self.joint_targets, "joint_targets")
        n = self.joint_targets.shape[0]
        for name in ("kp", "kd", "torque_ff"):
            value = getattr(self, name)
            if value is not None:
                array = np.asarray(value, dtype=np.float64)
                setattr(
                    self,
                    name,
                    np.broadcast_to(array, (n,)).copy() if array.ndim == 0 else _vector(array, name, n),
                )

    def is_finite(self) -> bool:
        arrays = [self.joint_targets, self.kp, self.kd, self.torque_ff]
        return all(a is None or bool(np.all(np.isfinite(a))) for a in arrays)
