"""UR5e tool deltas -> a tool pose target (the peg tip's position and yaw) -> servoL on the arm, as the simulator's
`PegEnv.set_targets` moves its target; the target stays in the task's workspace (`simdist.robots.ur5e.workspace`).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from simdist.hardware.state import RobotState
from simdist.robots.ur5e import workspace
from simdist.robots.ur5e.hardware import quaternion_to_rotvec
from simdist.runtime.actuation import Actuation


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

    def step(self, action: np.ndarray, command: np.ndarray, *, floor_z: float | None = None) -> None:
        """Move by one action; `floor_z` (the press guard's measured tool height): the target rises towards it
        instead of going lower, by at most one full action's step per tick."""
        a = np.asarray(action, dtype=np.float64)
        before = self.position[2]
        self.position = self.position + a[:3] * self.scale_m
        self.yaw += float(a[3]) * self.scale_rad
        low, high = workspace(np.asarray(command, dtype=np.float64)[:3], self.hole_depth)
        self.position = np.clip(self.position, low, high)
        if floor_z is not None:
            relieved = min(floor_z, before + self.scale_m, high[2])
            self.position[2] = max(self.position[2], relieved)

    def rotation(self) -> np.ndarray:
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])  # yaw times "tool down"

    def servo_pose(self) -> np.ndarray:
        """(x, y, z, rx, ry, rz) for servoL."""
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.rotation().reshape(-1))
        return np.concatenate([self.position, quaternion_to_rotvec(quat)])


PRESS_LIMITED = (
    "press_limited"  # the contact force was over the press limit: the target went no lower than the tool
)


class CartesianActuator:
    """UR5e tool deltas -> ToolTarget -> servoL. Holds (leaves servo mode) on a non-finite action or stale state.

    The press guard: while the measured contact force is above `press_limit_n`, the target goes no lower than the
    measured tool, so a position servo stops building force against the part (a UR5e's protective stop, 200 N by
    default, is the arm's own last resort, not the controller's force limit); flagged `press_limited`.
    """

    def __init__(
        self,
        robot: Any,
        tool: ToolTarget,
        *,
        command: Any,
        stale_after_s: float = 0.2,
        press_limit_n: float = float("inf"),
    ) -> None:
        self.robot = robot
        self.tool = tool
        self.command = command  # callable -> the current task command (hole estimate)
        self.stale_after_s = stale_after_s
        self.press_limit_n = press_limit_n
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
        pressing = (
            state.tool_wrench is not None and np.linalg.norm(state.tool_wrench[:3]) > self.press_limit_n
        )
        floor_z = float(state.tool_pose[2]) if pressing else None
        self.tool.step(action, self.command(), floor_z=floor_z)
        self.robot.send_tool_pose(self.tool.servo_pose())
        return Actuation(flags=frozenset({PRESS_LIMITED}) if pressing else frozenset())

    def hold(self) -> None:
        self.robot.hold()
