"""The SimDist nodes' topics, and numpy / core types <-> ROS 2 messages: the per-message conversions are
`simdist.bags.conversions`'s (one definition for the bags and the nodes), re-exported here with the nodes' own.

Messages are built through a `MessageFactory` (a full type name such as "sensor_msgs/msg/JointState" -> its class):
`ros_messages()` gives rclpy's generated classes; tests pass classes checked against the rosbags typestore's
Humble and Jazzy definitions, so field names and types are verified without ROS. Values follow rclpy's setters:
unbounded numeric sequences as `array.array`, fixed-size arrays as numpy, scalars as Python int/float.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from simdist_finetune.conversions import TOPIC as MODEL_VERSION  # the hot-swap signal

from simdist import robots
from simdist.bags import schema
from simdist.bags.conversions import (  # noqa: F401  (the nodes' conversions are these)
    BASE_FRAME,
    CAMERA_FRAME,
    TWIST_TYPE,
    MessageFactory,
    header,
    image_from_msg,
    image_msg,
    imu_from_msg,
    imu_msg,
    joint_state_from_msg,
    joint_state_msg,
    pose_from_msg,
    pose_msg,
    string_msg,
    twist_from_msg,
    twist_msg,
    vector_from_msg,
    vector_msg,
    wrench_from_msg,
    wrench_msg,
)
from simdist.errors import ConfigError
from simdist.hardware.state import RobotState

# Live-only topics (never written to bags: the bag's /simdist/observation already holds what they carry).
FOOT_FORCES = f"{schema.NAMESPACE}/foot_forces"  # Go2 foot forces FR, FL, RR, RL (Float32MultiArray)
EE_TWIST = f"{schema.NAMESPACE}/ee_twist"  # UR5e tool twist (TwistStamped), part of its proprio
TASK_COMMAND = f"{schema.NAMESPACE}/task_command"  # the robot side's task command (Float32MultiArray)
ROBOT_COMMAND = f"{schema.NAMESPACE}/robot_command"  # the task action to execute; empty data = hold
ROBOT_EVENTS = f"{schema.NAMESPACE}/robot_events"  # the simulated robot's episode ends (String, JSON)

LIVE_TOPIC_TYPES: dict[str, str] = {
    FOOT_FORCES: schema.VECTOR_TYPE,
    EE_TWIST: TWIST_TYPE,
    TASK_COMMAND: schema.VECTOR_TYPE,
    ROBOT_COMMAND: schema.VECTOR_TYPE,
    ROBOT_EVENTS: schema.EVENT_TYPE,
    MODEL_VERSION: schema.EVENT_TYPE,
}

# The live topic of each RobotState part (`simdist.robots.STATE_PARTS`); a robot node publishes the joints and its
# robot's parts, and the planner rebuilds a RobotState from them (`state_topics`).
PART_TOPICS: dict[str, str] = {
    "imu": schema.IMU,
    "foot_forces": FOOT_FORCES,
    "tool_pose": schema.EE_POSE,
    "tool_twist": EE_TWIST,
    "tool_wrench": schema.WRENCH,
}


def state_topics(robot: str) -> tuple[str, ...]:
    """The topics a robot node publishes for one measurement of `robot` (ValueError: unknown robot)."""
    return (schema.JOINT_STATES, *(PART_TOPICS[p] for p in _robot(robot).state_parts))


def _robot(name: str) -> Any:
    try:
        return robots.get(name)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


TICK_SEPARATOR = "@"


def ros_messages() -> MessageFactory:
    """rclpy's message classes by full type name (imports the ROS message packages on first use)."""

    def factory(name: str) -> Any:
        package, _, type_name = name.split("/")
        return getattr(importlib.import_module(f"{package}.msg"), type_name)

    return factory


def topic_type(topic: str) -> str:
    """The message type of a SimDist topic (bag schema or live-only)."""
    if topic in schema.TOPIC_TYPES:
        return schema.TOPIC_TYPES[topic]
    return LIVE_TOPIC_TYPES[topic]


@dataclass(frozen=True)
class TickLabel:
    """What labels one tick's vector: its number, its time and how many events came before it.

    DDS orders messages per topic only. The tick number lets the logger join the three vectors of one control
    tick whatever order they arrive in; `events` (the count of events the planner published before this tick)
    tells it which events must be written before the tick; `stamp_ns` is the tick's own time.
    """

    tick: int
    stamp_ns: int
    events: int


def tick_vector_msg(m: MessageFactory, values: Any, name: str, label: TickLabel) -> Any:
    """A per-tick vector (observation, action, command) labelled `name@tick@stamp_ns@events`."""
    sep = TICK_SEPARATOR
    return vector_msg(m, values, f"{name}{sep}{label.tick}{sep}{label.stamp_ns}{sep}{label.events}")


def tick_of(msg: Any) -> TickLabel | None:
    """The label of a `tick_vector_msg`, None for an unlabelled vector."""
    if not msg.layout.dim:
        return None
    parts = str(msg.layout.dim[0].label).split(TICK_SEPARATOR)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return TickLabel(tick=int(parts[1]), stamp_ns=int(parts[2]), events=int(parts[3]))


def event_msg(m: MessageFactory, kind: str, **fields: Any) -> Any:
    """A JSON event as std_msgs/String, in the bag's event format ({"event": kind, ...})."""
    return string_msg(m, json.dumps({"event": kind, **fields}))


def event_from_msg(msg: Any) -> dict[str, Any]:
    """The JSON event of a std_msgs/String; ValueError when it is not a JSON object with an "event" key."""
    payload = json.loads(str(msg.data))
    if not isinstance(payload, dict) or "event" not in payload:
        raise ValueError(f"not a SimDist event: {str(msg.data)[:80]!r}")
    return payload


# -- robot state ------------------------------------------------------------------------------------------------------


def state_messages(m: MessageFactory, robot: str, state: RobotState, stamp_ns: int) -> list[tuple[str, Any]]:
    """Every message a robot node publishes for one measurement: the bag schema's state topics and the live extras.

    Raises:
        ValueError: unknown robot, or the state lacks a field the robot's topics need.
    """
    description = _robot(robot)
    description.require(state)
    joints = joint_state_msg(
        m,
        stamp_ns,
        state.joint_names or (),
        state.joint_positions,
        state.joint_velocities,
        state.joint_torques,
    )
    out: list[tuple[str, Any]] = [(schema.JOINT_STATES, joints)]
    for part in description.state_parts:
        out.append((PART_TOPICS[part], _PART_TO_MSG[part](m, stamp_ns, state)))
    return out


_PART_TO_MSG: dict[str, Callable[[MessageFactory, int, RobotState], Any]] = {
    "imu": lambda m, t, s: imu_msg(m, t, s.imu_quaternion, s.imu_gyro, s.imu_accel),
    "foot_forces": lambda m, t, s: vector_msg(m, s.foot_forces, "foot_forces"),
    "tool_pose": lambda m, t, s: pose_msg(m, t, s.tool_pose),
    "tool_twist": lambda m, t, s: twist_msg(m, t, s.tool_twist),
    "tool_wrench": lambda m, t, s: wrench_msg(m, t, s.tool_wrench),
}


def _imu_fields(msg: Any) -> dict[str, np.ndarray]:
    imu = imu_from_msg(msg)
    return {"imu_quaternion": imu["quaternion"], "imu_gyro": imu["gyro"], "imu_accel": imu["accel"]}


_PART_FROM_MSG: dict[str, Callable[[Any], dict[str, np.ndarray]]] = {
    "imu": _imu_fields,
    "foot_forces": lambda msg: {"foot_forces": vector_from_msg(msg).astype(np.float64)},
    "tool_pose": lambda msg: {"tool_pose": pose_from_msg(msg)},
    "tool_twist": lambda msg: {"tool_twist": twist_from_msg(msg)},
    "tool_wrench": lambda msg: {"tool_wrench": wrench_from_msg(msg)},
}


def state_from_messages(robot: str, latest: Mapping[str, Any], timestamp: float) -> RobotState:
    """A RobotState from the latest message of each of the robot's `state_topics`.

    `timestamp` is the loop clock's time of the oldest of them (so staleness is judged on the oldest part).

    Raises:
        KeyError: a topic has no message yet.
    """
    missing = [t for t in state_topics(robot) if t not in latest]
    if missing:
        raise KeyError(f"no message yet on {', '.join(missing)}")
    joints = joint_state_from_msg(latest[schema.JOINT_STATES])
    effort = joints["effort"] if joints["effort"].size == joints["position"].size else None
    fields: dict[str, Any] = {}
    for part in _robot(robot).state_parts:
        fields.update(_PART_FROM_MSG[part](latest[PART_TOPICS[part]]))
    return RobotState(
        timestamp=timestamp,
        joint_positions=joints["position"],
        joint_velocities=joints["velocity"],
        joint_torques=effort,
        joint_names=joints["names"],
        **fields,
    )
