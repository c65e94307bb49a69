"""numpy <-> standard ROS 2 message dataclasses of the rosbags typestore: the only module that knows message fields.

Quaternions on the numpy side are (w, x, y, z) as in `RobotState`; ROS messages store (x, y, z, w).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
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


@functools.cache
def typestore_for(distro: str) -> Typestore:
    """The rosbags typestore carrying the standard message definitions of a ROS 2 distribution."""
    if distro not in DISTROS:
        raise ValueError(f"unknown ROS 2 distro '{distro}' (valid: {', '.join(DISTROS)})")
    return get_typestore(DISTROS[distro])


def _cls(ts: Typestore, msgtype: str) -> Any:
    return ts.types[msgtype]


def ns_to_stamp(ts: Typestore, stamp_ns: int) -> Any:
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return _cls(ts, "builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)


def stamp_to_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def header(ts: Typestore, stamp_ns: int, frame_id: str) -> Any:
    return _cls(ts, "std_msgs/msg/Header")(stamp=ns_to_stamp(ts, stamp_ns), frame_id=frame_id)


def _quat_msg(ts: Typestore, wxyz: np.ndarray) -> Any:
    w, x, y, z = (float(v) for v in wxyz)
    return _cls(ts, "geometry_msgs/msg/Quaternion")(x=x, y=y, z=z, w=w)


def _quat_wxyz(msg: Any) -> np.ndarray:
    return np.array([msg.w, msg.x, msg.y, msg.z], dtype=np.float64)


def _vec3_msg(ts: Typestore, xyz: np.ndarray, msgtype: str = "geometry_msgs/msg/Vector3") -> Any:
    x, y, z = (float(v) for v in xyz)
    return _cls(ts, msgtype)(x=x, y=y, z=z)


def _vec3(msg: Any) -> np.ndarray:
    return np.array([msg.x, msg.y, msg.z], dtype=np.float64)


def vector_msg(ts: Typestore, values: np.ndarray | Sequence[float], label: str = "") -> Any:
    """A flat float32 vector as std_msgs/Float32MultiArray with one labelled dimension."""
    data = np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))
    dim = _cls(ts, "std_msgs/msg/MultiArrayDimension")(label=label, size=data.size, stride=data.size)
    layout = _cls(ts, "std_msgs/msg/MultiArrayLayout")(dim=[dim], data_offset=0)
    return _cls(ts, schema.VECTOR_TYPE)(layout=layout, data=data)


def vector_from_msg(msg: Any) -> np.ndarray:
    """The float32 vector of a Float32MultiArray, honouring data_offset."""
    data = np.asarray(msg.data, dtype=np.float32)
    offset = int(msg.layout.data_offset)
    size = int(msg.layout.dim[0].size) if msg.layout.dim else data.size - offset
    return data[offset : offset + size].copy()


def string_msg(ts: Typestore, text: str) -> Any:
    return _cls(ts, schema.EVENT_TYPE)(data=text)


def text_from_msg(msg: Any) -> str:
    return str(msg.data)


def joint_state_msg(
    ts: Typestore,
    stamp_ns: int,
    names: Sequence[str],
    positions: np.ndarray,
    velocities: np.ndarray,
    efforts: np.ndarray | None = None,
) -> Any:
    """sensor_msgs/JointState; an unmeasured effort is an empty array, as the message definition allows."""
    return _cls(ts, schema.JOINT_STATE_TYPE)(
        header=header(ts, stamp_ns, BASE_FRAME),
        name=list(names),
        position=np.asarray(positions, dtype=np.float64).copy(),
        velocity=np.asarray(velocities, dtype=np.float64).copy(),
        effort=np.asarray(efforts if efforts is not None else [], dtype=np.float64).copy(),
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
    ts: Typestore, stamp_ns: int, quaternion_wxyz: np.ndarray, gyro: np.ndarray, accel: np.ndarray
) -> Any:
    """sensor_msgs/Imu with zero covariances (ROS's "covariance unknown")."""
    zeros = np.zeros(9, dtype=np.float64)
    return _cls(ts, schema.IMU_TYPE)(
        header=header(ts, stamp_ns, BASE_FRAME),
        orientation=_quat_msg(ts, quaternion_wxyz),
        orientation_covariance=zeros.copy(),
        angular_velocity=_vec3_msg(ts, gyro),
        angular_velocity_covariance=zeros.copy(),
        linear_acceleration=_vec3_msg(ts, accel),
        linear_acceleration_covariance=zeros.copy(),
    )


def imu_from_msg(msg: Any) -> dict[str, Any]:
    return {
        "stamp_ns": stamp_to_ns(msg.header.stamp),
        "quaternion": _quat_wxyz(msg.orientation),
        "gyro": _vec3(msg.angular_velocity),
        "accel": _vec3(msg.linear_acceleration),
    }


def wrench_msg(ts: Typestore, stamp_ns: int, wrench: np.ndarray) -> Any:
    """geometry_msgs/WrenchStamped from (fx, fy, fz, tx, ty, tz)."""
    w = np.asarray(wrench, dtype=np.float64)
    body = _cls(ts, "geometry_msgs/msg/Wrench")(force=_vec3_msg(ts, w[:3]), torque=_vec3_msg(ts, w[3:6]))
    return _cls(ts, schema.WRENCH_TYPE)(header=header(ts, stamp_ns, BASE_FRAME), wrench=body)


def wrench_from_msg(msg: Any) -> np.ndarray:
    return np.concatenate([_vec3(msg.wrench.force), _vec3(msg.wrench.torque)])


def pose_msg(ts: Typestore, stamp_ns: int, pose: np.ndarray) -> Any:
    """geometry_msgs/PoseStamped from (x, y, z, qw, qx, qy, qz)."""
    p = np.asarray(pose, dtype=np.float64)
    body = _cls(ts, "geometry_msgs/msg/Pose")(
        position=_vec3_msg(ts, p[:3], "geometry_msgs/msg/Point"), orientation=_quat_msg(ts, p[3:7])
    )
    return _cls(ts, schema.POSE_TYPE)(header=header(ts, stamp_ns, BASE_FRAME), pose=body)


def pose_from_msg(msg: Any) -> np.ndarray:
    return np.concatenate([_vec3(msg.pose.position), _quat_wxyz(msg.pose.orientation)])


def image_msg(ts: Typestore, stamp_ns: int, image: np.ndarray) -> Any:
    """sensor_msgs/Image from uint8 (H, W) -> mono8 or (H, W, 3) -> rgb8."""
    pixels = np.asarray(image)
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or (pixels.ndim == 3 and pixels.shape[2] != 3):
        raise ValueError(f"image must be uint8 (H, W) or (H, W, 3), got {pixels.dtype} {pixels.shape}")
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else 3
    return _cls(ts, schema.IMAGE_TYPE)(
        header=header(ts, stamp_ns, CAMERA_FRAME),
        height=height,
        width=width,
        encoding="mono8" if channels == 1 else "rgb8",
        is_bigendian=0,
        step=width * channels,
        data=np.ascontiguousarray(pixels).reshape(-1).copy(),
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
