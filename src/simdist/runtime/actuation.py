"""Task actions -> robot commands, in task units: Go2 joint offsets become joint targets (through the safety filter
on hardware), UR5e Cartesian tool deltas become a tool pose target (servoL on the real arm, the sim's IK in
simulation). Every actuator can `hold()`, the safe command the loop falls back to.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Protocol

import mujoco
import numpy as np

from simdist.hardware.safety import SafetyFilter, SafetyLimits
from simdist.hardware.state import JointCommand, RobotState
from simdist.paths import assets_dir
from simdist.runtime.proprio import GO2_STAND_POSE


@dataclass
class Actuation:
    """What reached the robot this tick: held (a safe command replaced the action) and why."""

    held: bool = False
    flags: frozenset[str] = field(default_factory=frozenset)


class Actuator(Protocol):
    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation: ...

    def hold(self) -> None: ...


class SimActuator:
    """The simulator takes the task action itself (`SimRobot.send_action`), exactly as in pretraining."""

    def __init__(self, robot: Any) -> None:
        self.robot = robot

    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation:
        self.robot.send_action(action)
        return Actuation()

    def hold(self) -> None:
        self.robot.hold()


GO2_VELOCITY_LIMIT = 30.0  # rad/s, the Go2 motors' no-load speed


@functools.cache
def go2_limits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper) joint range and torque limits (Unitree order) from the project's Go2 MJCF, the one source."""
    model = mujoco.MjModel.from_xml_path(str(assets_dir() / "go2.xml"))
    return (
        model.jnt_range[1:, 0].copy(),
        model.jnt_range[1:, 1].copy(),
        model.actuator_forcerange[:, 1].copy(),
    )


def go2_safety_limits(*, max_step: float = 0.3) -> SafetyLimits:
    """Safety limits for the Go2: joint range, 0.3 rad per tick (more than the planner's 0.25), motor limits."""
    lower, upper, torque = go2_limits()
    return SafetyLimits(
        position_lower=lower,
        position_upper=upper,
        max_step=max_step,
        velocity_limit=GO2_VELOCITY_LIMIT,
        torque_limit=torque,
        stale_after_s=0.1,
    )


class JointActuator:
    """Go2 joint offsets -> targets = stand + scale * action, clipped to the joint range, through the safety filter."""

    def __init__(
        self,
        robot: Any,
        *,
        action_scale: float,
        safety: SafetyFilter | None,
        stand_pose: np.ndarray = GO2_STAND_POSE,
    ) -> None:
        self.robot = robot
        self.action_scale = action_scale
        self.safety = safety
        self.stand_pose = np.asarray(stand_pose, dtype=np.float64)
        self.lower, self.upper, _ = go2_limits()

    def targets(self, action: np.ndarray) -> np.ndarray:
        return np.clip(
            self.stand_pose + self.action_scale * np.asarray(action, np.float64), self.lower, self.upper
        )

    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation:
        command = JointCommand(self.targets(action))
        if self.safety is None:
            self.robot.send(command)
            return Actuation()
        out = self.safety.filter(state, now, command)
        self.robot.send(out.command)
        return Actuation(held=out.held, flags=out.flags)

    def hold(self) -> None:
        if self.safety is not None:
            try:
                self.robot.send(self.safety.hold_command())
                return
            except RuntimeError:  # nothing sent yet: the robot's own hold
                pass
        self.robot.hold()


class ToolTarget:
    """The UR5e tool target (peg tip position, yaw) that Cartesian deltas move, as `PegEnv.set_targets` does.

    The tool points down; yaw turns about the vertical. The target stays in a box around the hole estimate
    (`command[:3]`) and above the hole floor, the sim's workspace limit.
    """

    def __init__(self, *, scale_m: float, scale_rad: float, hole_depth: float) -> None:
        self.scale_m = scale_m
        self.scale_rad = scale_rad
        self.hole_depth = hole_depth
        self.position = np.zeros(3)
        self.yaw = 0.0

    def reset(self, tool_pose: np.ndarray) -> None:
        """Start from a measured tool pose (x, y, z, qw, qx, qy, qz)."""
        pose = np.asarray(tool_pose, dtype=np.float64)
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, pose[3:7] / np.linalg.norm(pose[3:7]))
        rot = rot.reshape(3, 3)
        self.position = pose[:3].copy()
        self.yaw = float(np.arctan2(rot[1, 0], rot[0, 0]))

    def step(self, action: np.ndarray, command: np.ndarray) -> None:
        a = np.asarray(action, dtype=np.float64)
        self.position = self.position + a[:3] * self.scale_m
        self.yaw += float(a[3]) * self.scale_rad
        hole = np.asarray(command, dtype=np.float64)[:3]
        low = hole - np.array([0.12, 0.12, self.hole_depth + 0.01])
        high = hole + np.array([0.12, 0.12, 0.25])
        self.position = np.clip(self.position, low, high)

    def rotation(self) -> np.ndarray:
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])  # yaw times "tool down"

    def servo_pose(self) -> np.ndarray:
        """(x, y, z, rx, ry, rz) for servoL."""
        from simdist.hardware.ur5e import quaternion_to_rotvec

        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.rotation().reshape(-1))
        return np.concatenate([self.position, quaternion_to_rotvec(quat)])


class CartesianActuator:
    """UR5e tool deltas -> ToolTarget -> servoL. Holds (leaves servo mode) on a non-finite action or stale state."""

    def __init__(self, robot: Any, tool: ToolTarget, *, command: Any, stale_after_s: float = 0.2) -> None:
        self.robot = robot
        self.tool = tool
        self.command = command  # callable -> the current task command (hole estimate)
        self.stale_after_s = stale_after_s
        self._started = False

    def reset(self, state: RobotState) -> None:
        self.tool.reset(state.tool_pose)
        self._started = True

    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation:
        if not self._started:
            self.reset(state)
        if not np.all(np.isfinite(action)):
            self.hold()
            return Actuation(held=True, flags=frozenset({"non_finite_command"}))
        if now - state.timestamp > self.stale_after_s or not state.is_finite():
            self.hold()
            return Actuation(held=True, flags=frozenset({"stale_state"}))
        self.tool.step(action, self.command())
        self.robot.send_tool_pose(self.tool.servo_pose())
        return Actuation()

    def hold(self) -> None:
        self.robot.hold()
