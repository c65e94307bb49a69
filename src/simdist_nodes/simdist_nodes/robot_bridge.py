"""The robot node's side of the wire, without rclpy: one `Robot` (SimRobot or a hardware adapter) and the core's
actuator for it; task actions in, state, task command and (simulated) episode ends out.

The actuator and, on hardware, the safety filter run here, next to the robot, so a planner that stops talking
cannot leave the robot moving: `check_watchdog` holds it once commands are older than `watchdog_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from simdist.bags import schema
from simdist.runtime.actuation import Actuator
from simdist_nodes import conversions
from simdist_nodes.planner_io import Publish

log = logging.getLogger(__name__)


class RobotBridge:
    """Args:
    robot: a `Robot` (started already when it runs in real time).
    robot_kind: "go2" or "ur5e".
    actuator: from `simdist.runtime.deploy.make_actuator` (SimActuator, or joint targets / servoL on hardware).
    command: the task command now (a SimRobot's episode command, or the fixed one given to a hardware run).
    watchdog_s: hold the robot when no command came for this long.
    """

    def __init__(
        self,
        m: conversions.MessageFactory,
        publish: Publish,
        *,
        robot: Any,
        robot_kind: str,
        actuator: Actuator,
        command: Callable[[], np.ndarray],
        watchdog_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._m = m
        self._publish = publish
        self.robot = robot
        self.robot_kind = robot_kind
        self.actuator = actuator
        self.command = command
        self.watchdog_s = watchdog_s
        self._clock = clock
        self._last_command: float | None = None
        self._holding = False
        self.commands = 0
        self.holds = 0

    def on_command(self, msg: Any) -> None:
        """A task action from the planner (empty: hold). A failure holds the robot and is logged, never raised."""
        action = conversions.vector_from_msg(msg)
        self._last_command = self._clock()
        try:
            if action.size == 0:
                self._hold()
                return
            state = self.robot.read()
            result = self.actuator.apply(action, state, self._clock())
            self._holding = result.held
            self.commands += 1
        except Exception:
            log.exception("robot bridge: command failed; holding")
            self._hold()

    def _hold(self) -> None:
        self.holds += 1
        self._holding = True
        try:
            self.actuator.hold()
        except Exception:  # the robot itself is failing: nothing safer to send from here
            log.exception("robot bridge: hold failed too")

    def check_watchdog(self) -> bool:
        """Hold once when commands stopped coming (after the first one). Returns True when it held now."""
        if self._last_command is None or self._holding:
            return False
        if self._clock() - self._last_command > self.watchdog_s:
            log.warning("robot bridge: no command for %.2f s; holding", self._clock() - self._last_command)
            self._hold()
            return True
        return False

    def publish_state(self, stamp_ns: int) -> None:
        """The current measurement, the task command, and any episode end of a simulated robot."""
        state = self.robot.read()
        for topic, msg in conversions.state_messages(self._m, self.robot_kind, state, stamp_ns):
            self._publish(topic, msg)
        self._publish(conversions.TASK_COMMAND, conversions.vector_msg(self._m, self.command(), "command"))
        take = getattr(self.robot, "take_episode_end", None)
        while take is not None and (ended := take()) is not None:
            self._publish(
                conversions.ROBOT_EVENTS, conversions.event_msg(self._m, schema.EPISODE_END, **ended)
            )

    def image(self, stamp_ns: int) -> Any | None:
        """The simulated camera's frame as an Image message, when the robot has one."""
        grab = getattr(self.robot, "image", None)
        pixels = grab() if grab is not None else None
        return None if pixels is None else conversions.image_msg(self._m, stamp_ns, pixels)
