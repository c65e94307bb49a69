"""conversions.py against the standard message definitions that rosbags carries for Humble and Jazzy."""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys.store import Typestore

from simdist.bags import conversions, schema
from simdist.hardware.state import RobotState

DISTROS = ["humble", "jazzy"]

# The standard ROS 2 definitions (identical in Humble and Jazzy) of every type the schema and conversions touch.
STANDARD: dict[str, list[tuple[str, str]]] = {
    "sensor_msgs/msg/JointState": [
        ("header", "std_msgs/msg/Header"),
        ("name", "string[]"),
        ("position", "float64[]"),
        ("velocity", "float64[]"),
        ("effort", "float64[]"),
    ],
    "sensor_msgs/msg/Imu": [
        ("header", "std_msgs/msg/Header"),
        ("orientation", "geometry_msgs/msg/Quaternion"),
        ("orientation_covariance", "float64[9]"),
        ("angular_velocity", "geometry_msgs/msg/Vector3"),
        ("angular_velocity_covariance", "float64[9]"),
        ("linear_acceleration", "geometry_msgs/msg/Vector3"),
        ("linear_acceleration_covariance", "float64[9]"),
    ],
    "geometry_msgs/msg/WrenchStamped": [
        ("header", "std_msgs/msg/Header"),
        ("wrench", "geometry_msgs/msg/Wrench"),
    ],
    "geometry_msgs/msg/Wrench": [
        ("force", "geometry_msgs/msg/Vector3"),
        ("torque", "geometry_msgs/msg/Vector3"),
    ],
    "geometry_msgs/msg/PoseStamped": [("header", "std_msgs/msg/Header"), ("pose", "geometry_msgs/msg/Pose")],
    "geometry_msgs/msg/Pose": [
        ("position", "geometry_msgs/msg/Point"),
        ("orientation", "geometry_msgs/msg/Quaternion"),
    ],
    "geometry_msgs/msg/Quaternion": [("x", "float64"), ("y", "float64"), ("z", "float64"), ("w", "float64")],
    "geometry_msgs/msg/Vector3": [("x", "float64"), ("y", "float64"), ("z", "float64")],
    "geometry_msgs/msg/Point": [("x", "float64"), ("y", "float64"), ("z", "float64")],
    "sensor_msgs/msg/Image": [
        ("header", "std_msgs/msg/Header"),
        ("height", "uint32"),
        ("width", "uint32"),
        ("encoding", "string"),
        ("is_bigendian", "uint8"),
        ("step", "uint32"),
        ("data", "uint8[]"),
    ],
    "std_msgs/msg/Float32MultiArray": [("layout", "std_msgs/msg/MultiArrayLayout"), ("data", "float32[]")],
    "std_msgs/msg/MultiArrayLayout": [
        ("dim", "std_msgs/msg/MultiArrayDimension[]"),
        ("data_offset", "uint32"),
    ],
    "std_msgs/msg/MultiArrayDimension": [("label", "string"), ("size", "uint32"), ("stride", "uint32")],
    "std_msgs/msg/String": [("data", "string")],
    "std_msgs/msg/Header": [("stamp", "builtin_interfaces/msg/Time"), ("frame_id", "string")],
    "builtin_interfaces/msg/Time": [("sec", "int32"), ("nanosec", "uint32")],
}


def _render(node: tuple) -> str:
    kind, detail = node
    name = getattr(kind, "name", str(kind))
    if name == "BASE":
        return detail[0]
    if name == "NAME":
        return detail
    inner, count = detail
    return f"{_render(inner)}[{count if name == 'ARRAY' else ''}]"


def _fields(ts: Typestore, msgtype: str) -> list[tuple[str, str]]:
    return [(field, _render(node)) for field, node in ts.fielddefs[msgtype][1]]


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("msgtype", sorted(STANDARD))
def test_typestore_carries_the_standard_definition(distro: str, msgtype: str) -> None:
    assert _fields(conversions.typestore_for(distro), msgtype) == STANDARD[msgtype]


def test_schema_uses_only_standard_types() -> None:
    assert set(schema.TOPIC_TYPES.values()) <= set(STANDARD)
    assert all(topic.startswith("/simdist/") for topic in schema.TOPIC_TYPES)
    for robot in ("go2", "ur5e"):
        assert set(schema.COMMON_TOPICS) <= set(schema.topics_for(robot))
        assert set(schema.robot_topics(robot)) <= set(schema.topics_for(robot))
    assert schema.topics_for("go2")[:2] == (schema.JOINT_STATES, schema.IMU)
    assert schema.WRENCH in schema.topics_for("ur5e") and schema.IMU not in schema.topics_for("ur5e")
    with pytest.raises(ValueError, match="go2, ur5e"):
        schema.topics_for("spot")


def _cdr_round_trip(ts: Typestore, msg: object, msgtype: str) -> object:
    return ts.deserialize_cdr(ts.serialize_cdr(msg, msgtype), msgtype)


@pytest.mark.parametrize("distro", DISTROS)
def test_vector_round_trip_is_float32_exact(distro: str) -> None:
    ts = conversions.typestore_for(distro)
    values = np.array([0.1, -2.5e-8, 3.0e7, np.pi], dtype=np.float32)
    msg = _cdr_round_trip(ts, conversions.vector_msg(ts, values, "observation"), schema.VECTOR_TYPE)
    assert msg.layout.dim[0].label == "observation" and msg.layout.dim[0].size == 4
    out = conversions.vector_from_msg(msg)
    assert out.dtype == np.float32 and np.array_equal(out, values)


def test_vector_from_msg_honours_data_offset() -> None:
    ts = conversions.typestore_for("jazzy")
    msg = conversions.vector_msg(ts, [9.0, 1.0, 2.0])
    msg.layout.data_offset = 1
    msg.layout.dim[0].size = 2
    assert conversions.vector_from_msg(msg).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("distro", DISTROS)
def test_joint_state_round_trip(distro: str) -> None:
    ts = conversions.typestore_for(distro)
    names = ("a", "b", "c")
    msg = conversions.joint_state_msg(
        ts, 1_500_000_123, names, [0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    )
    back = conversions.joint_state_from_msg(_cdr_round_trip(ts, msg, schema.JOINT_STATE_TYPE))
    assert back["stamp_ns"] == 1_500_000_123
    assert back["names"] == names
    assert back["position"].tolist() == [0.1, 0.2, 0.3]
    assert back["velocity"].tolist() == [1.0, 2.0, 3.0]
    assert back["effort"].tolist() == [4.0, 5.0, 6.0]
    unmeasured = conversions.joint_state_msg(ts, 0, names, [0, 0, 0], [0, 0, 0], None)
    assert conversions.joint_state_from_msg(unmeasured)["effort"].size == 0


@pytest.mark.parametrize("distro", DISTROS)
def test_imu_reorders_quaternion_to_ros_xyzw(distro: str) -> None:
    ts = conversions.typestore_for(distro)
    msg = conversions.imu_msg(ts, 7, [0.1, 0.2, 0.3, 0.4], [1, 2, 3], [4, 5, 6])
    assert (msg.orientation.x, msg.orientation.y, msg.orientation.z, msg.orientation.w) == (
        0.2,
        0.3,
        0.4,
        0.1,
    )
    back = conversions.imu_from_msg(_cdr_round_trip(ts, msg, schema.IMU_TYPE))
    assert back["quaternion"].tolist() == [0.1, 0.2, 0.3, 0.4]
    assert back["gyro"].tolist() == [1, 2, 3] and back["accel"].tolist() == [4, 5, 6]


@pytest.mark.parametrize("distro", DISTROS)
def test_wrench_and_pose_round_trip(distro: str) -> None:
    ts = conversions.typestore_for(distro)
    wrench = np.array([1.0, -2.0, 3.0, 0.1, -0.2, 0.3])
    msg = _cdr_round_trip(ts, conversions.wrench_msg(ts, 5, wrench), schema.WRENCH_TYPE)
    assert (msg.wrench.force.x, msg.wrench.torque.z) == (1.0, 0.3)
    assert conversions.wrench_from_msg(msg).tolist() == wrench.tolist()
    pose = np.array([0.4, 0.5, 0.6, 0.0, 1.0, 0.0, 0.0])  # 180 deg about x
    msg = _cdr_round_trip(ts, conversions.pose_msg(ts, 5, pose), schema.POSE_TYPE)
    assert (msg.pose.orientation.x, msg.pose.orientation.w) == (1.0, 0.0)
    assert conversions.pose_from_msg(msg).tolist() == pose.tolist()


@pytest.mark.parametrize("distro", DISTROS)
def test_image_round_trip(distro: str) -> None:
    ts = conversions.typestore_for(distro)
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    msg = _cdr_round_trip(ts, conversions.image_msg(ts, 1, rgb), schema.IMAGE_TYPE)
    assert (msg.encoding, msg.height, msg.width, msg.step) == ("rgb8", 4, 5, 15)
    assert np.array_equal(conversions.image_from_msg(msg), rgb)
    mono = rgb[..., 0].copy()
    assert np.array_equal(conversions.image_from_msg(conversions.image_msg(ts, 1, mono)), mono)
    with pytest.raises(ValueError, match="uint8"):
        conversions.image_msg(ts, 1, rgb.astype(np.float32))


def test_state_messages_follow_the_robot_topics() -> None:
    ts = conversions.typestore_for("jazzy")
    state = RobotState(
        timestamp=0.0,
        joint_positions=np.zeros(6),
        joint_velocities=np.zeros(6),
        imu_quaternion=[1, 0, 0, 0],
        tool_pose=[0, 0, 0, 1, 0, 0, 0],
        tool_wrench=np.arange(6),
    )
    go2 = [topic for topic, _ in conversions.state_messages(ts, state, schema.topics_for("go2"), 1)]
    assert go2 == [schema.JOINT_STATES, schema.IMU]
    ur5e = [topic for topic, _ in conversions.state_messages(ts, state, schema.topics_for("ur5e"), 1)]
    assert ur5e == [schema.JOINT_STATES, schema.WRENCH, schema.EE_POSE]
    bare = RobotState(timestamp=0.0, joint_positions=np.zeros(6), joint_velocities=np.zeros(6))
    assert [t for t, _ in conversions.state_messages(ts, bare, schema.topics_for("ur5e"), 1)] == [
        schema.JOINT_STATES
    ]
