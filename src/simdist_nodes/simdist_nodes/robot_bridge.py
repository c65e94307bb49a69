"""The robot node's side of the wire, without rclpy: one `Robot` (SimRobot or a hardware adapter) and the core's
actuator for it; task actions in, state, task command and (simulated) episode ends out.

The actuator and, on hardware, the safety filter run here, next to the robot, so a planner that stops talking
cannot leave the robot moving: `check_watchdog` holds it once commands are older than `watchdog_s` and, if none
came by `stop_s`, stops it safely (the Go2's damping mode; the UR5e's servoStop, which is its hold). A hold ends
when commands come back; a safe stop is final for this node (restart it to move again).

Commands arrive on the executor's thread, the watchdog runs on the state thread and the node's shutdown on the main
thread: one lock serialises everything that sends to the robot, so no command runs after the safe stop or the final
hold, and no two threads write a driver's command buffer at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from simdist.bags import schema
from simdist.runtime.actuation import Actuator, safe_stop
from simdist.runtime.watchdog import HOLD, RESUME, SAFE_STOP, Watchdog
from simdist_nodes import conversions
from simdist_nodes.planner_io import Publish

log = logging.getLogger(__name__)


class RobotBridge:
    """Args:
    robot: a `Robot` (started already when it runs in real time).
    robot_kind: the task's robot (`simdist.robots` name).
    actuator: from `simdist.runtime.deploy.make_actuator` (SimActuator, or joint targets / servoL on hardware).
    command: the task command now (a SimRobot's episode command, or the fixed one given to a hardware run).
    watchdog_s: hold the robot when no command came for this long.
    stop_s: stop it safely when none came for this long (counted from the last command, like `watchdog_s`).
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
        stop_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._m = m
        self._publish = publish
        self.robot = robot
        self.robot_kind = robot_kind
        self.actuator = actuator
        self.command = command
        self.watchdog_s = watchdog_s
        self.stop_s = max(stop_s, watchdog_s)
        self._clock = clock
        self.watchdog = Watchdog(self.watchdog_s, self.stop_s)
        self._lock = threading.Lock()  # every send to the robot, and the watchdog's stage, under it
        self.closed = False  # set by `shutdown`: nothing is sent after the final hold
        self.commands = 0
        self.holds = 0
        self.refused = 0  # commands that came after the safe stop
        self.hold_requests = 0  # empty commands: the planner asked for a hold (its final one among them)
        self.first_command: float | None = None  # clock times of the first and last executed action
        self.last_command: float | None = None

    def on_command(self, msg: Any) -> None:
        """A task action from the planner (empty: hold). A failure holds the robot and is logged, never raised."""
        action = conversions.vector_from_msg(msg)
        with self._lock:
            self._on_action(action)

    def _on_action(self, action: np.ndarray) -> None:
        if self.closed:
            return
        if self.watchdog.stopped:
            self.refused += 1
            if self.refused == 1:
                log.error("robot bridge: a command came after the safe stop; ignored until the node restarts")
            return
        if (outage := self.watchdog.good(self._clock())) is not None:
            log.warning("robot bridge: commands are back after %.2f s; resuming", outage)
            self._publish_watchdog(RESUME, outage)
        try:
            if action.size == 0:
                self.hold_requests += 1
                self._hold()
                return
            state = self.robot.read()
            now = self._clock()
            self.actuator.apply(action, state, now)
            self.commands += 1
            self.first_command = now if self.first_command is None else self.first_command
            self.last_command = now
        except Exception:
            log.exception("robot bridge: command failed; holding")
            self._hold()

    def _hold(self) -> None:
        self.holds += 1
        try:
            self.actuator.hold()
        except Exception:  # the robot itself is failing: nothing safer to send from here
            log.exception("robot bridge: hold failed too")

    def _safe_stop(self) -> None:
        try:
            safe_stop(self.robot, self.actuator)
        except Exception:
            log.exception("robot bridge: safe stop failed")

    @property
    def stage(self) -> str | None:
        """None (commands flowing), "hold" or "safe_stop" (final)."""
        return self.watchdog.stage

    def check_watchdog(self) -> str | None:
        """Escalate when commands stopped coming (after the first one): hold after `watchdog_s`, safe stop after
        `stop_s`. Returns the stage entered now (also published as a `watchdog` event and logged), else None."""
        with self._lock:
            if self.closed:
                return None
            now = self._clock()
            stage = self.watchdog.check(now)
            if stage == HOLD:
                self._hold()
            elif stage == SAFE_STOP:
                self._safe_stop()
            else:
                return None
        age = self.watchdog.age(now)
        what = "holding" if stage == HOLD else "safe stop (damping on a Go2, servoStop on a UR5e)"
        log.warning("robot bridge: no command for %.2f s; %s", age, what)
        self._publish_watchdog(stage, age)
        return self.stage

    def shutdown(self, stop: Callable[[], None]) -> None:
        """The node's last word to the robot: a hold (none after the watchdog's safe stop, which a hold would undo on
        a Go2), then `stop` (the robot's own stop); every command that still arrives is dropped. Waits for a command
        being sent now to finish first."""
        with self._lock:
            self.closed = True
            try:
                if not self.watchdog.stopped:
                    self.actuator.hold()
            finally:
                stop()

    def _publish_watchdog(self, stage: str, age: float) -> None:
        """A `watchdog` event (hold, safe_stop, or resume: commands back after a hold) for the bag."""
        self._publish(
            conversions.ROBOT_EVENTS,
            conversions.event_msg(
                self._m, schema.WATCHDOG, stage=stage, age_s=round(age, 3), time_ns=time.time_ns()
            ),
        )

    @property
    def command_span_s(self) -> float:
        """Seconds from the first executed action to the last (the span the command rate is measured over)."""
        if self.first_command is None or self.last_command is None:
            return 0.0
        return self.last_command - self.first_command

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
