"""numpy / core types <-> ROS 2 messages for the SimDist nodes: the only node module that knows message fields.

Messages are built through a `MessageFactory` (a full type name such as "sensor_msgs/msg/JointState" -> its class):
`ros_messages()` gives rclpy's generated classes; tests pass classes checked against the rosbags typestore's
Humble and Jazzy definitions, so field names and types are verified without ROS. Values follow rclpy's setters:
unbounded numeric sequences as `array.array`, fixed-size arrays as numpy, scalars as Python int/float.
Reading a message back reuses `simdist.bags.conversions` (its readers only use attribute access).
"""

from __future__ import annotations

import array
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from simdist_finetune.conversions import TOPIC as MODEL_VERSION  # the hot-swap signal

from simdist import robots
from simdist.bags import conversions as bag_conversions
from simdist.bags import schema
from simdist.errors import ConfigError
from simdist.hardware.state import RobotState

MessageFactory = Callable[[str], Any]

# Live-only topics (never written to bags: the bag's /simdist/observation already holds what they carry).
FOOT_FORCES = f"{schema.NAMESPACE}/foot_forces"  # Go2 foot forces FR, FL, RR, RL (Float32MultiArray)
EE_TWIST = f"{schema.NAMESPACE}/ee_twist"  # UR5e tool twist (TwistStamped), part of its proprio
TASK_COMMAND = f"{schema.NAMESPACE}/task_command"  # the robot side's task command (Float32MultiArray)
ROBOT_COMMAND = f"{schema.NAMESPACE}/robot_command"  # the task action to execute; empty data = hold
ROBOT_EVENTS = f"{schema.NAMESPACE}/robot_events"  # the simulated robot's episode ends (String, JSON)

TWIST_TYPE = "geometry_msgs/msg/TwistStamped"

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


# -- building blocks ------------------------------------------------------------------------------------------------


def _doubles(values: Any) -> array.array:
    return array.array("d", np.asarray(values, dtype=np.float64).reshape(-1).tolist())


def stamp(m: MessageFactory, stamp_ns: int) -> Any:
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return m("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)


def header(m: MessageFactory, stamp_ns: int, frame_id: str = bag_conversions.BASE_FRAME) -> Any:
    return m("std_msgs/msg/Header")(stamp=stamp(m, stamp_ns), frame_id=frame_id)


def _vector3(m: MessageFactory, xyz: Any, name: str = "geometry_msgs/msg/Vector3") -> Any:
    x, y, z = (float(v) for v in np.asarray(xyz, dtype=np.float64).reshape(3))
    return m(name)(x=x, y=y, z=z)


def _quaternion(m: MessageFactory, wxyz: Any) -> Any:
    w, x, y, z = (float(v) for v in np.asarray(wxyz, dtype=np.float64).reshape(4))
    return m("geometry_msgs/msg/Quaternion")(x=x, y=y, z=z, w=w)


# -- vectors and text -------------------------------------------------------------------------------------------------


def vector_msg(m: MessageFactory, values: Any, label: str = "") -> Any:
    """A flat float32 vector as std_msgs/Float32MultiArray with one labelled dimension."""
    data = np.asarray(values, dtype=np.float32).reshape(-1)
    dim = m("std_msgs/msg/MultiArrayDimension")(label=label, size=int(data.size), stride=int(data.size))
    layout = m("std_msgs/msg/MultiArrayLayout")(dim=[dim], data_offset=0)
    return m(schema.VECTOR_TYPE)(layout=layout, data=array.array("f", data.tolist()))


def vector_from_msg(msg: Any) -> np.ndarray:
    return bag_conversions.vector_from_msg(msg)


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


def string_msg(m: MessageFactory, text: str) -> Any:
    return m(schema.EVENT_TYPE)(data=text)


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


def joint_state_msg(m: MessageFactory, stamp_ns: int, state: RobotState, names: Sequence[str] = ()) -> Any:
    effort: Any = state.joint_torques if state.joint_torques is not None else []
    return m(schema.JOINT_STATE_TYPE)(
        header=header(m, stamp_ns),
        name=[str(n) for n in (state.joint_names or names)],
        position=_doubles(state.joint_positions),
        velocity=_doubles(state.joint_velocities),
        effort=_doubles(effort),
    )


def imu_msg(m: MessageFactory, stamp_ns: int, quaternion_wxyz: Any, gyro: Any, accel: Any) -> Any:
    """sensor_msgs/Imu with zero covariances (ROS's "covariance unknown")."""
    return m(schema.IMU_TYPE)(
        header=header(m, stamp_ns),
        orientation=_quaternion(m, quaternion_wxyz),
        orientation_covariance=np.zeros(9),
        angular_velocity=_vector3(m, gyro),
        angular_velocity_covariance=np.zeros(9),
        linear_acceleration=_vector3(m, accel),
        linear_acceleration_covariance=np.zeros(9),
    )


def wrench_msg(m: MessageFactory, stamp_ns: int, wrench: Any) -> Any:
    w = np.asarray(wrench, dtype=np.float64).reshape(6)
    body = m("geometry_msgs/msg/Wrench")(force=_vector3(m, w[:3]), torque=_vector3(m, w[3:]))
    return m(schema.WRENCH_TYPE)(header=header(m, stamp_ns), wrench=body)


def pose_msg(m: MessageFactory, stamp_ns: int, pose: Any) -> Any:
    """geometry_msgs/PoseStamped from (x, y, z, qw, qx, qy, qz)."""
    p = np.asarray(pose, dtype=np.float64).reshape(7)
    body = m("geometry_msgs/msg/Pose")(
        position=_vector3(m, p[:3], "geometry_msgs/msg/Point"), orientation=_quaternion(m, p[3:])
    )
    return m(schema.POSE_TYPE)(header=header(m, stamp_ns), pose=body)


def twist_msg(m: MessageFactory, stamp_ns: int, twist: Any) -> Any:
    """geometry_msgs/TwistStamped from (vx, vy, vz, wx, wy, wz)."""
    t = np.asarray(twist, dtype=np.float64).reshape(6)
    body = m("geometry_msgs/msg/Twist")(linear=_vector3(m, t[:3]), angular=_vector3(m, t[3:]))
    return m(TWIST_TYPE)(header=header(m, stamp_ns), twist=body)


def twist_from_msg(msg: Any) -> np.ndarray:
    t = msg.twist
    return np.array(
        [t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z], dtype=np.float64
    )


def image_msg(m: MessageFactory, stamp_ns: int, image: np.ndarray) -> Any:
    """sensor_msgs/Image from uint8 (H, W) -> mono8 or (H, W, 3) -> rgb8."""
    pixels = np.asarray(image)
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[2] != 3):
        raise ValueError(f"image must be uint8 (H, W) or (H, W, 3), got {pixels.dtype} {pixels.shape}")
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else 3
    return m(schema.IMAGE_TYPE)(
        header=header(m, stamp_ns, bag_conversions.CAMERA_FRAME),
        height=int(height),
        width=int(width),
        encoding="mono8" if channels == 1 else "rgb8",
        is_bigendian=0,
        step=int(width * channels),
        data=array.array("B", np.ascontiguousarray(pixels).tobytes()),
    )


def image_from_msg(msg: Any) -> np.ndarray:
    return bag_conversions.image_from_msg(msg)


def state_messages(m: MessageFactory, robot: str, state: RobotState, stamp_ns: int) -> list[tuple[str, Any]]:
    """Every message a robot node publishes for one measurement: the bag schema's state topics and the live extras.

    Raises:
        ValueError: unknown robot, or the state lacks a field the robot's topics need.
    """
    description = _robot(robot)
    description.require(state)
    out: list[tuple[str, Any]] = [(schema.JOINT_STATES, joint_state_msg(m, stamp_ns, state))]
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
    imu = bag_conversions.imu_from_msg(msg)
    return {"imu_quaternion": imu["quaternion"], "imu_gyro": imu["gyro"], "imu_accel": imu["accel"]}


_PART_FROM_MSG: dict[str, Callable[[Any], dict[str, np.ndarray]]] = {
    "imu": _imu_fields,
    "foot_forces": lambda msg: {"foot_forces": vector_from_msg(msg).astype(np.float64)},
    "tool_pose": lambda msg: {"tool_pose": bag_conversions.pose_from_msg(msg)},
    "tool_twist": lambda msg: {"tool_twist": twist_from_msg(msg)},
    "tool_wrench": lambda msg: {"tool_wrench": bag_conversions.wrench_from_msg(msg)},
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
    joints = bag_conversions.joint_state_from_msg(latest[schema.JOINT_STATES])
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
