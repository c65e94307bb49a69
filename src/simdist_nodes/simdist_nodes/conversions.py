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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from simdist_finetune.conversions import TOPIC as MODEL_VERSION  # the hot-swap signal

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

# The topics a robot node publishes and the planner needs to rebuild a RobotState.
STATE_TOPICS: dict[str, tuple[str, ...]] = {
    "go2": (schema.JOINT_STATES, schema.IMU, FOOT_FORCES),
    "ur5e": (schema.JOINT_STATES, schema.EE_POSE, EE_TWIST, schema.WRENCH),
}

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
    if robot not in STATE_TOPICS:
        raise ValueError(f"unknown robot '{robot}' (valid: {', '.join(STATE_TOPICS)})")
    joints = joint_state_msg(
        m,
        stamp_ns,
        state.joint_names or (),
        state.joint_positions,
        state.joint_velocities,
        state.joint_torques,
    )
    out: list[tuple[str, Any]] = [(schema.JOINT_STATES, joints)]
    if robot == "go2":
        if state.imu_quaternion is None or state.imu_gyro is None or state.imu_accel is None:
            raise ValueError("a go2 state needs imu_quaternion, imu_gyro and imu_accel")
        if state.foot_forces is None:
            raise ValueError("a go2 state needs foot_forces")
        out.append((schema.IMU, imu_msg(m, stamp_ns, state.imu_quaternion, state.imu_gyro, state.imu_accel)))
        out.append((FOOT_FORCES, vector_msg(m, state.foot_forces, "foot_forces")))
        return out
    if state.tool_pose is None or state.tool_twist is None or state.tool_wrench is None:
        raise ValueError("a ur5e state needs tool_pose, tool_twist and tool_wrench")
    out.append((schema.EE_POSE, pose_msg(m, stamp_ns, state.tool_pose)))
    out.append((EE_TWIST, twist_msg(m, stamp_ns, state.tool_twist)))
    out.append((schema.WRENCH, wrench_msg(m, stamp_ns, state.tool_wrench)))
    return out


def state_from_messages(robot: str, latest: Mapping[str, Any], timestamp: float) -> RobotState:
    """A RobotState from the latest message of each of the robot's `STATE_TOPICS`.

    `timestamp` is the loop clock's time of the oldest of them (so staleness is judged on the oldest part).

    Raises:
        KeyError: a topic has no message yet.
    """
    missing = [t for t in STATE_TOPICS[robot] if t not in latest]
    if missing:
        raise KeyError(f"no message yet on {', '.join(missing)}")
    joints = joint_state_from_msg(latest[schema.JOINT_STATES])
    effort = joints["effort"] if joints["effort"].size == joints["position"].size else None
    common = {
        "timestamp": timestamp,
        "joint_positions": joints["position"],
        "joint_velocities": joints["velocity"],
        "joint_torques": effort,
        "joint_names": joints["names"],
    }
    if robot == "go2":
        imu = imu_from_msg(latest[schema.IMU])
        return RobotState(
            **common,
            imu_quaternion=imu["quaternion"],
            imu_gyro=imu["gyro"],
            imu_accel=imu["accel"],
            foot_forces=vector_from_msg(latest[FOOT_FORCES]).astype(np.float64),
        )
    return RobotState(
        **common,
        tool_pose=pose_from_msg(latest[schema.EE_POSE]),
        tool_twist=twist_from_msg(latest[EE_TWIST]),
        tool_wrench=wrench_from_msg(latest[schema.WRENCH]),
    )
