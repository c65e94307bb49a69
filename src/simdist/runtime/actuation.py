"""Task actions -> robot commands, in task units. The simulator takes task actions itself; on hardware each robot's
description builds its actuator (`RobotDescription.actuator`): joint offsets become joint targets through the
safety filter (`JointActuator`, the Go2), tool deltas a tool pose target (`simdist.robots.ur5e.actuation`).
Every actuator can `hold()`, the safe command the loop falls back to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from simdist.hardware.safety import SafetyFilter
from simdist.hardware.state import JointCommand, RobotState


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


class JointActuator:
    """Joint offsets -> targets = stand + scale * action, clipped to the joint range, through the safety filter.

    `kp`, `kd`: the PD gains the robot's motors run the targets with (the Go2's low-level command), sent with each
    command so that the filter bounds the PD torque they imply (kp (target - q) - kd qd within the motor's limit);
    None where the robot applies gains of its own that are not known here (the simulator's actuators)."""

    def __init__(
        self,
        robot: Any,
        *,
        action_scale: float,
        safety: SafetyFilter | None,
        stand_pose: np.ndarray,
        lower: np.ndarray,
        upper: np.ndarray,
        kp: np.ndarray | None = None,
        kd: np.ndarray | None = None,
    ) -> None:
        self.robot = robot
        self.kp = None if kp is None else np.asarray(kp, dtype=np.float64)
        self.kd = None if kd is None else np.asarray(kd, dtype=np.float64)
        self.action_scale = action_scale
        self.safety = safety
        self.stand_pose = np.asarray(stand_pose, dtype=np.float64)
        self.lower = np.asarray(lower, dtype=np.float64)
        self.upper = np.asarray(upper, dtype=np.float64)

    def targets(self, action: np.ndarray) -> np.ndarray:
        return np.clip(
            self.stand_pose + self.action_scale * np.asarray(action, np.float64), self.lower, self.upper
        )

    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation:
        command = JointCommand(self.targets(action), kp=self.kp, kd=self.kd)
        if self.safety is None:
            self.robot.send(command)
            return Actuation()
        # rate-limit from what the robot holds now, not from where it has sagged to
        if not self.safety.started:
            self.safety.reset(state, last_target=getattr(self.robot, "last_target", None))
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


def safe_stop(robot: Any, actuator: Actuator) -> None:
    """The robot's safe stop: its damping mode where it has one (the Go2), else the actuator's hold (the UR5e's
    servoStop). The one escalation the deploy loop and the ROS robot node both end in; raises what the robot
    raises (the caller logs it: nothing safer can be sent from here)."""
    damp = getattr(robot, "damp", None)
    try:
        if damp is None:
            raise NotImplementedError
        damp()
    except NotImplementedError:  # no damping mode: the hold is the safe stop
        actuator.hold()
