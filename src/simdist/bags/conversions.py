"""numpy <-> standard ROS 2 messages: the only module that knows message fields, for the bags and the ROS nodes.

Every conversion takes a message source: a rosbags `Typestore` (the bag writer: the typestore's dataclasses, numeric
sequences as numpy arrays), or a `MessageFactory` (a full type name such as "sensor_msgs/msg/JointState" -> its
class: the nodes' rclpy classes, whose setters take unbounded numeric sequences as `array.array`). Readers only use
attribute access, so they read either kind.

Quaternions on the numpy side are (w, x, y, z) as in `RobotState`; ROS messages store (x, y, z, w).
"""

from __future__ import annotations

import array
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from simdist.bags import schema
from simdist.hardware.state import RobotState

Distro = Literal["humble", "jazzy"]
DISTROS: dict[str, Stores] = {"humble": Stores.ROS2_HUMBLE, "jazzy": Stores.ROS2_JAZZY}

BASE_FRAME = "base"
CAMERA_FRAME = "camera"

MessageFactory = Callable[[str], Any]
TWIST_TYPE = "geometry_msgs/msg/TwistStamped"  # a live-only topic's type (the UR5e's tool twist)


@functools.cache
def typestore_for(distro: str) -> Typestore:
    """The rosbags typestore carrying the standard message definitions of a ROS 2 distribution."""
    if distro not in DISTROS:
        raise ValueError(f"unknown ROS 2 distro '{distro}' (valid: {', '.join(DISTROS)})")
    return get_typestore(DISTROS[distro])


_DTYPES = {"d": np.float64, "f": np.float32, "B": np.uint8}


@dataclass(frozen=True)
class _Kit:
    """How one message library is built: its classes by full type name, and an unbounded numeric sequence."""

    cls: MessageFactory
    sequence: Callable[[Any, str], Any]  # (values, array typecode "d" | "f" | "B") -> the field's value


def _numpy_sequence(values: Any, typecode: str) -> np.ndarray:
    return np.array(values, dtype=_DTYPES[typecode]).reshape(-1)  # a copy: the message owns its data


def _array_sequence(values: Any, typecode: str) -> array.array:
    return array.array(typecode, np.ascontiguousarray(values, dtype=_DTYPES[typecode]).reshape(-1).tobytes())


def _kit(source: Typestore | MessageFactory) -> _Kit:
    if isinstance(source, Typestore):
        return _Kit(source.types.__getitem__, _numpy_sequence)
    return _Kit(source, _array_sequence)


# -- building blocks ------------------------------------------------------------------------------------------------


def ns_to_stamp(source: Typestore | MessageFactory, stamp_ns: int) -> Any:
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return _kit(source).cls("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)


def stamp_to_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def header(source: Typestore | MessageFactory, stamp_ns: int, frame_id: str = BASE_FRAME) -> Any:
    return _kit(source).cls("std_msgs/msg/Header")(stamp=ns_to_stamp(source, stamp_ns), frame_id=frame_id)


def _quat_msg(k: _Kit, wxyz: Any) -> Any:
    w, x, y, z = (float(v) for v in np.asarray(wxyz, dtype=np.float64).reshape(4))
    return k.cls("geometry_msgs/msg/Quaternion")(x=x, y=y, z=z, w=w)


def _quat_wxyz(msg: Any) -> np.ndarray:
    return np.array([msg.w, msg.x, msg.y, msg.z], dtype=np.float64)


def _vec3_msg(k: _Kit, xyz: Any, msgtype: str = "geometry_msgs/msg/Vector3") -> Any:
    x, y, z = (float(v) for v in np.asarray(xyz, dtype=np.float64).reshape(3))
    return k.cls(msgtype)(x=x, y=y, z=z)


def _vec3(msg: Any) -> np.ndarray:
    return np.array([msg.x, msg.y, msg.z], dtype=np.float64)


# -- vectors and text -------------------------------------------------------------------------------------------------


def vector_msg(
    source: Typestore | MessageFactory, values: np.ndarray | Sequence[float], label: str = ""
) -> Any:
    """A flat float32 vector as std_msgs/Float32MultiArray with one labelled dimension."""
    k = _kit(source)
    data = np.asarray(values, dtype=np.float32).reshape(-1)
    dim = k.cls("std_msgs/msg/MultiArrayDimension")(label=label, size=int(data.size), stride=int(data.size))
    layout = k.cls("std_msgs/msg/MultiArrayLayout")(dim=[dim], data_offset=0)
    return k.cls(schema.VECTOR_TYPE)(layout=layout, data=k.sequence(data, "f"))


def vector_from_msg(msg: Any) -> np.ndarray:
    """The float32 vector of a Float32MultiArray, honouring data_offset."""
    data = np.asarray(msg.data, dtype=np.float32)
    offset = int(msg.layout.data_offset)
    size = int(msg.layout.dim[0].size) if msg.layout.dim else data.size - offset
    return data[offset : offset + size].copy()


def string_msg(source: Typestore | MessageFactory, text: str) -> Any:
    return _kit(source).cls(schema.EVENT_TYPE)(data=text)


def text_from_msg(msg: Any) -> str:
    return str(msg.data)


# -- robot state ------------------------------------------------------------------------------------------------------


def joint_state_msg(
    source: Typestore | MessageFactory,
    stamp_ns: int,
    names: Sequence[str],
    positions: np.ndarray,
    velocities: np.ndarray,
    efforts: np.ndarray | None = None,
) -> Any:
    """sensor_msgs/JointState; an unmeasured effort is an empty array, as the message definition allows."""
    k = _kit(source)
    return k.cls(schema.JOINT_STATE_TYPE)(
        header=header(source, stamp_ns, BASE_FRAME),
        name=[str(n) for n in names],
        position=k.sequence(positions, "d"),
        velocity=k.sequence(velocities, "d"),
        effort=k.sequence(efforts if efforts is not None else [], "d"),
    )


def joint_state_from_msg(msg: Any) -> dict[str, Any]:
    return {
        "stamp_ns": stamp_to_ns(msg.header.stamp),
        "names": tuple(msg.name),
        "position": np.asarray(msg.position, dtype=np.float64),
        "velocity": np.asarray(msg.velocity, dtype=np.float64),
        "effort": np.asarray(msg.effort, dtype=np.float64),
    }


def imu_msg(
    source: Typestore | MessageFactory, stamp_ns: int, quaternion_wxyz: Any, gyro: Any, accel: Any
) -> Any:
    """sensor_msgs/Imu with zero covariances (ROS's "covariance unknown")."""
    k = _kit(source)
    return k.cls(schema.IMU_TYPE)(
        header=header(source, stamp_ns, BASE_FRAME),
        orientation=_quat_msg(k, quaternion_wxyz),
        orientation_covariance=np.zeros(9, dtype=np.float64),  # fixed-size arrays are numpy for both kinds
        angular_velocity=_vec3_msg(k, gyro),
        angular_velocity_covariance=np.zeros(9, dtype=np.float64),
        linear_acceleration=_vec3_msg(k, accel),
        linear_acceleration_covariance=np.zeros(9, dtype=np.float64),
    )


def imu_from_msg(msg: Any) -> dict[str, Any]:
    return {
        "stamp_ns": stamp_to_ns(msg.header.stamp),
        "quaternion": _quat_wxyz(msg.orientation),
        "gyro": _vec3(msg.angular_velocity),
        "accel": _vec3(msg.linear_acceleration),
    }


def wrench_msg(source: Typestore | MessageFactory, stamp_ns: int, wrench: Any) -> Any:
    """geometry_msgs/WrenchStamped from (fx, fy, fz, tx, ty, tz)."""
    k = _kit(source)
    w = np.asarray(wrench, dtype=np.float64).reshape(6)
    body = k.cls("geometry_msgs/msg/Wrench")(force=_vec3_msg(k, w[:3]), torque=_vec3_msg(k, w[3:]))
    return k.cls(schema.WRENCH_TYPE)(header=header(source, stamp_ns, BASE_FRAME), wrench=body)


def wrench_from_msg(msg: Any) -> np.ndarray:
    return np.concatenate([_vec3(msg.wrench.force), _vec3(msg.wrench.torque)])


def pose_msg(source: Typestore | MessageFactory, stamp_ns: int, pose: Any) -> Any:
    """geometry_msgs/PoseStamped from (x, y, z, qw, qx, qy, qz)."""
    k = _kit(source)
    p = np.asarray(pose, dtype=np.float64).reshape(7)
    body = k.cls("geometry_msgs/msg/Pose")(
        position=_vec3_msg(k, p[:3], "geometry_msgs/msg/Point"), orientation=_quat_msg(k, p[3:])
    )
    return k.cls(schema.POSE_TYPE)(header=header(source, stamp_ns, BASE_FRAME), pose=body)


def pose_from_msg(msg: Any) -> np.ndarray:
    return np.concatenate([_vec3(msg.pose.position), _quat_wxyz(msg.pose.orientation)])


def twist_msg(source: Typestore | MessageFactory, stamp_ns: int, twist: Any) -> Any:
    """geometry_msgs/TwistStamped from (vx, vy, vz, wx, wy, wz)."""
    k = _kit(source)
    t = np.asarray(twist, dtype=np.float64).reshape(6)
    body = k.cls("geometry_msgs/msg/Twist")(linear=_vec3_msg(k, t[:3]), angular=_vec3_msg(k, t[3:]))
    return k.cls(TWIST_TYPE)(header=header(source, stamp_ns, BASE_FRAME), twist=body)


def twist_from_msg(msg: Any) -> np.ndarray:
    return np.concatenate([_vec3(msg.twist.linear), _vec3(msg.twist.angular)])


def image_msg(source: Typestore | MessageFactory, stamp_ns: int, image: np.ndarray) -> Any:
    """sensor_msgs/Image from uint8 (H, W) -> mono8 or (H, W, 3) -> rgb8."""
    k = _kit(source)
    pixels = np.asarray(image)
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[2] != 3):
        raise ValueError(f"image must be uint8 (H, W) or (H, W, 3), got {pixels.dtype} {pixels.shape}")
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else 3
    return k.cls(schema.IMAGE_TYPE)(
        header=header(source, stamp_ns, CAMERA_FRAME),
        height=int(height),
        width=int(width),
        encoding="mono8" if channels == 1 else "rgb8",
        is_bigendian=0,
        step=int(width * channels),
        data=k.sequence(pixels, "B"),
    )


def image_from_msg(msg: Any) -> np.ndarray:
    channels = {"mono8": 1, "rgb8": 3, "bgr8": 3}.get(msg.encoding)
    if channels is None:
        raise ValueError(f"unsupported image encoding '{msg.encoding}' (supported: mono8, rgb8, bgr8)")
    rows = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)
    pixels = rows[:, : msg.width * channels].reshape(msg.height, msg.width, channels)
    if msg.encoding == "bgr8":
        pixels = pixels[..., ::-1]
    return pixels[..., 0].copy() if channels == 1 else pixels.copy()


def state_messages(
    ts: Typestore, state: RobotState, topics: Sequence[str], stamp_ns: int
) -> list[tuple[str, Any]]:
    """The robot-state messages of one tick for the given topics; a field the robot did not measure is skipped."""
    out: list[tuple[str, Any]] = []
    if schema.JOINT_STATES in topics:
        out.append(
            (
                schema.JOINT_STATES,
                joint_state_msg(
                    ts,
                    stamp_ns,
                    state.joint_names,
                    state.joint_positions,
                    state.joint_velocities,
                    state.joint_torques,
                ),
            )
        )
    if schema.IMU in topics and state.imu_quaternion is not None:
        gyro = state.imu_gyro if state.imu_gyro is not None else np.zeros(3)
        accel = state.imu_accel if state.imu_accel is not None else np.zeros(3)
        out.append((schema.IMU, imu_msg(ts, stamp_ns, state.imu_quaternion, gyro, accel)))
    if schema.WRENCH in topics and state.tool_wrench is not None:
        out.append((schema.WRENCH, wrench_msg(ts, stamp_ns, state.tool_wrench)))
    if schema.EE_POSE in topics and state.tool_pose is not None:
        out.append((schema.EE_POSE, pose_msg(ts, stamp_ns, state.tool_pose)))
    return out
