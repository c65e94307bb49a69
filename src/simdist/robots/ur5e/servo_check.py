"""What the deploy stack promises a UR5e, checked at the emulated arm (`simdist bench faults --task ur5e_peg`).

Every servo target the control script applies (servoL: the TCP pose; servoJ: joint targets) is checked once, when it
arrives, against what `simdist.robots.ur5e.actuation.CartesianActuator` promises: finite; the tool pointing down
(tilt within `TILT_TOLERANCE_RAD`); the position inside the task's workspace box around the nominal hole
(`simdist.robots.ur5e.workspace`); a step from the previous target of at most one full action per axis
(`peg.action_scale_m` m and `peg.action_scale_rad` rad of yaw, the task's `action_clip` 1). After a stop (servoStop,
the script stopped, a protective stop) the previous target is the one the arm holds, so a resumed servo that jumps
from where the arm stopped is caught. servoJ targets: inside the UR5e's joint range (+-2 pi) and a step of at most
the joints' top speed (pi rad/s on every UR5e joint) for one control period. The times of the stops are kept too.
"""

from __future__ import annotations

import math

import numpy as np

from simdist.hardware.emulated_faults import UnsafeTally
from simdist.robots.ur5e import workspace
from simdist.robots.ur5e.hardware import rotvec_to_matrix

TILT_TOLERANCE_RAD = 0.05
JOINT_RANGE_RAD = 2.0 * math.pi
JOINT_SPEED_RAD_S = math.pi  # every UR5e joint: 180 deg/s


class ServoCheck(UnsafeTally):
    """Args:
    hole, hole_depth: the workspace box's hole (the task's nominal) and depth.
    step_m, step_rad: the most a servoL target may move per axis (m) and in yaw (rad) from the last one.
    control_hz: the deploy's rate (servoJ's joint step is the top speed over one period).
    """

    def __init__(
        self, *, hole: np.ndarray, hole_depth: float, step_m: float, step_rad: float, control_hz: float
    ) -> None:
        super().__init__()
        self.low, self.high = workspace(np.asarray(hole, dtype=np.float64), hole_depth)
        self.step_m, self.step_rad = step_m, step_rad
        self.joint_step = JOINT_SPEED_RAD_S / control_hz
        self.commands = 0
        self.stops: list[tuple[float, str]] = []  # (seconds after the first command, why) of each stop
        self._last: tuple[str, np.ndarray] | None = (
            None  # the last target: ("pose", (x, y, z, yaw)) or joints
        )

    def stopped(self, t: float | None, why: str) -> None:
        """The arm stopped (it now holds where it is): the next target is measured from there."""
        self._last = None
        if t is not None:
            self.stops.append((t, why))

    def pose(self, pose: np.ndarray, t: float | None, held: np.ndarray) -> bool:
        """A servoL target (x, y, z, rx, ry, rz); `held` is the (x, y, z, yaw) the arm tracks now."""
        self.commands += 1
        pose = np.asarray(pose, dtype=np.float64)
        if pose.shape != (6,) or not np.isfinite(pose).all():
            return self.record(["non-finite or malformed pose"], t)
        rot = rotvec_to_matrix(pose[3:])
        problems = []
        tilt = math.acos(float(np.clip(-rot[2, 2], -1.0, 1.0)))
        if tilt > TILT_TOLERANCE_RAD:
            problems.append(f"tool tilted {tilt:.3f} rad")
        if np.any(pose[:3] < self.low - 1e-6) or np.any(pose[:3] > self.high + 1e-6):
            problems.append(f"position {np.round(pose[:3], 4).tolist()} outside the workspace")
        target = np.array([*pose[:3], math.atan2(rot[1, 0], rot[0, 0])])
        last = self._last[1] if self._last is not None and self._last[0] == "pose" else held
        step = np.abs(target[:3] - last[:3])
        if step.max() > self.step_m + 1e-6:
            problems.append(f"position step {step.max() * 1e3:.1f} mm > {self.step_m * 1e3:g} mm")
        yaw_step = abs(math.remainder(target[3] - last[3], 2.0 * math.pi))
        if yaw_step > self.step_rad + 1e-6:
            problems.append(f"yaw step {yaw_step:.3f} > {self.step_rad:g} rad")
        self._last = ("pose", target)
        return self.record(problems, t)

    def joints(self, q: np.ndarray, t: float | None, held: np.ndarray) -> bool:
        """A servoJ target; `held` is the joint position the arm tracks now."""
        self.commands += 1
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (6,) or not np.isfinite(q).all():
            return self.record(["non-finite or malformed joint targets"], t)
        problems = []
        if np.any(np.abs(q) > JOINT_RANGE_RAD):
            problems.append("joint target outside +-2 pi")
        last = self._last[1] if self._last is not None and self._last[0] == "joints" else held
        if np.abs(q - last).max() > self.joint_step + 1e-6:
            problems.append(f"joint step {np.abs(q - last).max():.3f} > {self.joint_step:.3f} rad")
        self._last = ("joints", q)
        return self.record(problems, t)
