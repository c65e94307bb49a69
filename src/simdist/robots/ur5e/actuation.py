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

    def step(self, action: np.ndarray, command: np.ndarray, *, floor_z: float | None = None) -> bool:
        """Move by one action; `floor_z` (the press guard's lowest target): the target goes no lower, rising
        towards it by at most one full action's step per tick. Returns whether the floor raised the target."""
        a = np.asarray(action, dtype=np.float64)
        before = self.position[2]
        self.position = self.position + a[:3] * self.scale_m
        self.yaw += float(a[3]) * self.scale_rad
        low, high = workspace(np.asarray(command, dtype=np.float64)[:3], self.hole_depth)
        self.position = np.clip(self.position, low, high)
        if floor_z is None:
            return False
        relieved = min(floor_z, before + self.scale_m, high[2])
        raised = bool(relieved > self.position[2])
        self.position[2] = max(self.position[2], relieved)
        return raised

    def rotation(self) -> np.ndarray:
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])  # yaw times "tool down"

    def servo_pose(self) -> np.ndarray:
        """(x, y, z, rx, ry, rz) for servoL."""
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.rotation().reshape(-1))
        return np.concatenate([self.position, quaternion_to_rotvec(quat)])


# the contact force was over half the press limit and the target was raised to the floor it allows
PRESS_LIMITED = "press_limited"


class CartesianActuator:
    """UR5e tool deltas -> ToolTarget -> servoL. Holds (leaves servo mode) on a non-finite action or stale state.

    The press guard: from half of `press_limit_n` on, the target may sit less and less under the measured tool (one
    action's step at half the limit, none at the limit), so a position servo stops building force against the part
    before the arm's protective stop (200 N by default: its last resort, not the controller's force limit); a tick
    whose target it raised is flagged `press_limited`.
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
        limited = self.tool.step(action, self.command(), floor_z=self._press_floor(state))
        self.robot.send_tool_pose(self.tool.servo_pose())
        return Actuation(flags=frozenset({PRESS_LIMITED}) if limited else frozenset())

    def _press_floor(self, state: RobotState) -> float | None:
        """The lowest tool target the contact force allows: from half the press limit on, how far the target may
        sit under the measured tool (what a position servo turns into force) shrinks from one action's step to
        nothing at the limit, so the force levels off under it instead of overshooting between two ticks."""
        if state.tool_wrench is None:
            return None
        force = float(np.linalg.norm(state.tool_wrench[:3]))
        half = 0.5 * self.press_limit_n
        if not force > half:
            return None
        room = float(np.clip((self.press_limit_n - force) / half, 0.0, 1.0)) * self.tool.scale_m
        return float(state.tool_pose[2]) - room

    def hold(self) -> None:
        self.robot.hold()
