"""The planner node's side of the wire, without rclpy: the core's DeployLoop runs unchanged between these.

`TopicRobot` is a `Robot` rebuilt from the robot node's topics, `RemoteActuator` sends the task action back on
/simdist/robot_command, and `TickPublisher` stands where the deploy loop's BagWriter would be, publishing the exact
vectors and events of each tick for the logger node. Each buffer that the sensing callbacks and the control timer
share has its own lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from simdist import robots
from simdist.bags import schema
from simdist.errors import RobotConnectionError
from simdist.hardware.state import JointCommand, RobotState
from simdist.runtime.actuation import Actuation
from simdist_nodes import conversions

Publish = Callable[[str, Any], None]


def joint_names_for(robot: str) -> tuple[str, ...]:
    """The joint names a robot reports (Unitree order for the Go2, base to wrist for the UR5e)."""
    return robots.get(robot).joint_names


class TopicRobot:
    """The latest state, task command and episode ends the robot node published, behind the `Robot` protocol.

    Args:
        robot: the task's robot (`simdist.robots` name): which topics make a state.
        joint_names, control_hz: as the robot reports them.
        clock: the deploy loop's clock (time.monotonic): a state's timestamp is when its oldest part arrived.
    """

    def __init__(
        self,
        robot: str,
        joint_names: tuple[str, ...],
        control_hz: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.robot = robot
        self.joint_names = joint_names
        self.control_hz = control_hz
        self.topics = conversions.state_topics(robot)
        self._clock = clock
        self._state_lock = threading.Lock()
        self._latest: dict[str, tuple[float, Any]] = {}
        self._command_lock = threading.Lock()
        self._command: np.ndarray | None = None
        self._episodes_lock = threading.Lock()
        self._episode_ends: deque[dict[str, Any]] = deque()

    # -- sensing callbacks ---------------------------------------------------------------------------------------
    def on_state(self, topic: str, msg: Any) -> None:
        with self._state_lock:
            self._latest[topic] = (self._clock(), msg)

    def on_task_command(self, msg: Any) -> None:
        vector = conversions.vector_from_msg(msg)
        with self._command_lock:
            self._command = vector

    def on_robot_event(self, msg: Any) -> None:
        """Episode ends of a simulated robot; other events are ignored."""
        event = conversions.event_from_msg(msg)
        if event["event"] == schema.EPISODE_END:
            with self._episodes_lock:
                self._episode_ends.append(event)

    # -- what the deploy loop calls ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        with self._state_lock:
            return all(topic in self._latest for topic in self.topics)

    def read(self) -> RobotState:
        with self._state_lock:
            latest = dict(self._latest)
        if not all(topic in latest for topic in self.topics):
            missing = [t for t in self.topics if t not in latest]
            raise RobotConnectionError(f"no state from the robot node yet ({', '.join(missing)})")
        oldest = min(latest[t][0] for t in self.topics)
        return conversions.state_from_messages(self.robot, {t: latest[t][1] for t in self.topics}, oldest)

    def command(self) -> np.ndarray | None:
        with self._command_lock:
            return None if self._command is None else self._command.copy()

    def take_episode_end(self) -> dict[str, Any] | None:
        with self._episodes_lock:
            return self._episode_ends.popleft() if self._episode_ends else None

    def send(self, command: JointCommand) -> None:
        raise RobotConnectionError("the planner node commands the robot through /simdist/robot_command only")

    def hold(self) -> None:  # holding is the robot node's job (RemoteActuator.hold asks for it)
        pass

    def stop(self) -> None:
        pass


class RemoteActuator:
    """Publishes the task action on /simdist/robot_command; an empty vector asks the robot node to hold."""

    def __init__(self, m: conversions.MessageFactory, publish: Publish) -> None:
        self._m = m
        self._publish = publish

    def apply(self, action: np.ndarray, state: RobotState, now: float) -> Actuation:
        self._publish(conversions.ROBOT_COMMAND, conversions.vector_msg(self._m, action, "action"))
        return Actuation()

    def hold(self) -> None:
        self._publish(conversions.ROBOT_COMMAND, conversions.vector_msg(self._m, [], "hold"))


class TickPublisher:
    """Takes the deploy loop's bag calls and publishes them for the logger node.

    Every vector is labelled with its tick (the count of ticks published before it), the tick's time and the
    count of events published before it; every event carries `seq` (its own count) and `tick` (the tick it
    precedes). With these the logger writes each tick once it is complete, after exactly the events that came
    before it, and can prove a tick or event lost when a later one on the same topic arrived.
    """

    def __init__(self, m: conversions.MessageFactory, publish: Publish) -> None:
        self._m = m
        self._publish = publish
        self.ticks = 0
        self.events = 0

    def event(self, kind: str, *, stamp_ns: int | None = None, **fields: Any) -> None:
        time_ns = time.time_ns() if stamp_ns is None else int(stamp_ns)
        msg = conversions.event_msg(
            self._m, kind, tick=self.ticks, seq=self.events, time_ns=time_ns, **fields
        )
        self.events += 1
        self._publish(schema.EVENTS, msg)

    def start_episode(self, *, model_version: str, stamp_ns: int | None = None, **fields: Any) -> None:
        self.event(schema.EPISODE_START, stamp_ns=stamp_ns, model_version=model_version, **fields)

    def end_episode(self, *, success: bool, stamp_ns: int | None = None, **fields: Any) -> None:
        self.event(schema.EPISODE_END, stamp_ns=stamp_ns, success=bool(success), **fields)

    def set_model_version(self, model_version: str, *, stamp_ns: int | None = None) -> None:
        self.event(schema.MODEL_VERSION, stamp_ns=stamp_ns, model_version=model_version)

    def append(
        self,
        *,
        observation: np.ndarray,
        action: np.ndarray,
        command: np.ndarray,
        state: RobotState | None = None,
        image: np.ndarray | None = None,
        stamp_ns: int | None = None,
    ) -> None:
        """The robot node publishes the state and image itself; only the model's vectors go out here."""
        label = conversions.TickLabel(
            tick=self.ticks,
            stamp_ns=time.time_ns() if stamp_ns is None else int(stamp_ns),
            events=self.events,
        )
        for topic, values in (
            (schema.OBSERVATION, observation),
            (schema.ACTION, action),
            (schema.COMMAND, command),
        ):
            name = topic.rsplit("/", 1)[-1]
            self._publish(topic, conversions.tick_vector_msg(self._m, values, name, label))
        self.ticks += 1
