"""UR5e tool deltas -> a tool pose target (the peg tip's position and yaw) -> servoL on the arm, as the simulator's
`PegEnv.set_targets` moves its target; the target stays in the task's workspace (`simdist.robots.ur5e.workspace`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from simdist.hardware.state import RobotState
from simdist.robots.ur5e import workspace
from simdist.robots.ur5e.hardware import quaternion_to_rotvec
from simdist.runtime.actuation import Actuation

log = logging.getLogger(__name__)


def pose_rotation(pose: np.ndarray) -> np.ndarray:
    """The 3x3 rotation (base axes) of a pose (x, y, z, qw, qx, qy, qz), its quaternion normalised."""
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, pose[3:7] / np.linalg.norm(pose[3:7]))
    return rot.reshape(3, 3)


class ToolTarget:
    """The UR5e tool target (peg tip position, yaw) that Cartesian deltas move, as `PegEnv.set_targets` does.

    The tool points down; yaw turns about the vertical. The target stays in a box around the hole estimate
    (`command[:3]`) and above the hole floor, the sim's workspace limit.

    What servoL is sent moves at most `STEP_LIMIT` full actions' steps a tick from what it was sent last (position:
    2 x `scale_m`, the most an action and the press guard's back-off move it together; orientation: 2 x
    `scale_rad`), starting from the measured pose: an arm that starts outside the box, or tilted, is brought into
    it at that rate instead of in one servo period. Inside the box, tool down, the limit never binds.
    """

    STEP_LIMIT = 2.0

    def __init__(self, *, scale_m: float, scale_rad: float, hole_depth: float) -> None:
        self.scale_m = scale_m
        self.scale_rad = scale_rad
        self.hole_depth = hole_depth
        self.position = np.zeros(3)
        self.yaw = 0.0
        self.sent_rotation: np.ndarray | None = None  # the orientation sent last (3x3), None before the first

    def reset(self, tool_pose: np.ndarray) -> None:
        """Start from a measured tool pose (x, y, z, qw, qx, qy, qz)."""
        pose = np.asarray(tool_pose, dtype=np.float64)
        rot = pose_rotation(pose)
        self.position = pose[:3].copy()
        self.yaw = float(np.arctan2(rot[1, 0], rot[0, 0]))
        self.sent_rotation = rot

    def outside(self, command: np.ndarray) -> float:
        """How far (m) the target is outside the workspace box around the hole estimate `command[:3]`."""
        low, high = workspace(np.asarray(command, dtype=np.float64)[:3], self.hole_depth)
        return float(np.linalg.norm(self.position - np.clip(self.position, low, high)))

    def step(self, action: np.ndarray, command: np.ndarray, *, press: PressCap | None = None) -> bool:
        """Move by one action; `press` (the press guard's cap): the target sits no further than `press.push_m`
        beyond the measured tool along `press.axis`, backing off towards it by at most one full action's step per
        tick. Returns whether the cap moved the target."""
        a = np.asarray(action, dtype=np.float64)
        before = self.position.copy()
        self.position = self.position + a[:3] * self.scale_m
        self.yaw += float(a[3]) * self.scale_rad
        low, high = workspace(np.asarray(command, dtype=np.float64)[:3], self.hole_depth)
        self.position = np.clip(self.position, low, high)
        if press is None:
            return False
        pushed = float((self.position - press.tool) @ press.axis)
        allowed = max(press.push_m, float((before - press.tool) @ press.axis) - self.scale_m)
        if not pushed > allowed:
            return False
        self.position = np.clip(self.position - (pushed - allowed) * press.axis, low, high)
        return True

    def limit_step(self, last_position: np.ndarray) -> bool:
        """Bring the target within the step limit of the position sent last (`last_position`) and the orientation
        sent last; returns whether it had to (the target then is what is sent, so it never runs ahead)."""
        limited = False
        move = self.position - last_position
        most = self.STEP_LIMIT * self.scale_m
        if (length := float(np.linalg.norm(move))) > most:
            self.position = last_position + move * (most / length)
            limited = True
        wanted = self.rotation()
        if self.sent_rotation is None:
            self.sent_rotation = wanted
            return limited
        turn = self.sent_rotation.T @ wanted
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, turn.reshape(-1))
        quat *= -1.0 if quat[0] < 0 else 1.0  # the shorter way round
        angle = 2.0 * float(np.arctan2(np.linalg.norm(quat[1:]), quat[0]))
        most_rad = self.STEP_LIMIT * self.scale_rad
        if angle <= most_rad:
            self.sent_rotation = wanted
            return limited
        half = 0.5 * most_rad
        part = np.concatenate([[np.cos(half)], quat[1:] / np.linalg.norm(quat[1:]) * np.sin(half)])
        step = np.zeros(9)
        mujoco.mju_quat2Mat(step, part)
        self.sent_rotation = self.sent_rotation @ step.reshape(3, 3)
        return True

    def rotation(self) -> np.ndarray:
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])  # yaw times "tool down"

    def servo_pose(self) -> np.ndarray:
        """(x, y, z, rx, ry, rz) for servoL: the target's position, the orientation `limit_step` left."""
        rotation = self.rotation() if self.sent_rotation is None else self.sent_rotation
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rotation.reshape(-1))
        return np.concatenate([self.position, quaternion_to_rotvec(quat)])


@dataclass(frozen=True)
class PressCap:
    """The press guard's cap for one tick: the tool target may sit at most `push_m` beyond the measured tool
    position `tool` along the unit `axis` (base axes)."""

    axis: np.ndarray
    push_m: float
    tool: np.ndarray


# the press guard moved the tool target back towards the measured tool this tick
PRESS_LIMITED = "press_limited"
# the step limit held the tool target back (an arm that started outside the workspace or tilted, moving in)
STEP_LIMITED = "step_limited"
# a fraction of the press limit: under that force the measurement says too little about the contact to scale
PRESS_SENSING = 0.1


class CartesianActuator:
    """UR5e tool deltas -> ToolTarget -> servoL. Holds (leaves servo mode) on a non-finite action or stale state.

    The press guard: in contact, a position servo acts as a spring, the contact force growing with how far its
    target sits beyond the tool along the force. So once the measured force is above a tenth of `press_limit_n`,
    the target's push along the force's axis (towards the side the last target pushed, whatever the sensor's sign
    convention) is capped at the last push scaled by aimed / measured force, the push the measured stiffness turns
    into the aimed force: halfway from the measured force up to the limit while under it, the limit itself while
    over it (the target backs off). Any axis: a peg pressed sideways against the hole's wall counts as much as one
    pressed down. The force then settles near the limit, under the arm's protective stop (200 N by default: its
    last resort, not the controller's force limit), instead of overshooting between two ticks; what it does not
    see (the stiffness differs across axes, so a sideways move at the same push changes the force) overshoots the
    limit by up to about a sixth, measured against the emulated arm. A tick whose target it moved is flagged
    `press_limited`.
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
        if (off := self.tool.outside(self.command())) > self.tool.scale_m:
            log.warning(
                "UR5e tool starts %.3f m outside the workspace around the hole estimate: moving in at %.3f m a tick",
                off,
                self.tool.STEP_LIMIT * self.tool.scale_m,
            )

    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation:
        if not self._started:
            self.reset(state)
        if not np.all(np.isfinite(action)):
            self.hold()
            return Actuation(held=True, flags=frozenset({"non_finite_command"}))
        if now - state.timestamp > self.stale_after_s or not state.is_finite():
            self.hold()
            return Actuation(held=True, flags=frozenset({"stale_state"}))
        last = self.tool.position.copy()
        pressed = self.tool.step(action, self.command(), press=self._press_cap(state))
        stepped = self.tool.limit_step(last)
        self.robot.send_tool_pose(self.tool.servo_pose())
        flags = {PRESS_LIMITED} if pressed else set()
        return Actuation(flags=frozenset(flags | ({STEP_LIMITED} if stepped else set())))

    def _press_cap(self, state: RobotState) -> PressCap | None:
        """This tick's cap from the measured wrench (flange axes) and the target sent last tick."""
        if state.tool_wrench is None or not np.isfinite(self.press_limit_n):
            return None
        pose = np.asarray(state.tool_pose, dtype=np.float64)
        force = pose_rotation(pose) @ np.asarray(state.tool_wrench[:3], dtype=np.float64)  # base axes
        newtons = float(np.linalg.norm(force))
        if not newtons > PRESS_SENSING * self.press_limit_n:
            return None
        axis, tool = force / newtons, pose[:3].copy()
        push = float((self.tool.position - tool) @ axis)  # along the force, by the target sent last tick
        if push < 0.0:
            axis, push = -axis, -push
        # the force aimed at: halfway up to the limit, or down to it
        aim = min(0.5 * (newtons + self.press_limit_n), self.press_limit_n)
        return PressCap(axis=axis, push_m=push * aim / newtons, tool=tool)

    def hold(self) -> None:
        self.robot.hold()
