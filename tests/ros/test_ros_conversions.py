"""The nodes' message conversions against the standard Humble and Jazzy definitions (field names and types, as
rclpy's setters check them), serialised to CDR and read back through the core's readers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import StrictMessages

from simdist.bags import schema
from simdist.hardware.state import RobotState
from simdist_finetune import conversions as finetune_conversions
from simdist_nodes import conversions


def _go2_state() -> RobotState:
    rng = np.random.default_rng(0)
    quat = rng.normal(size=4)
    return RobotState(
        timestamp=1.0,
        joint_positions=rng.normal(size=12),
        joint_velocities=rng.normal(size=12),
        joint_torques=rng.normal(size=12),
        imu_quaternion=quat / np.linalg.norm(quat),
        imu_gyro=rng.normal(size=3),
        imu_accel=rng.normal(size=3),
        foot_forces=rng.uniform(0, 50, size=4),
        joint_names=tuple(f"j{i}" for i in range(12)),
    )


def _ur5e_state() -> RobotState:
    rng = np.random.default_rng(1)
    quat = rng.normal(size=4)
    return RobotState(
        timestamp=2.0,
        joint_positions=rng.normal(size=6),
        joint_velocities=rng.normal(size=6),
        tool_pose=np.concatenate([rng.normal(size=3), quat / np.linalg.norm(quat)]),
        tool_twist=rng.normal(size=6),
        tool_wrench=rng.normal(size=6),
        joint_names=tuple(f"j{i}" for i in range(6)),
    )


@pytest.mark.parametrize(("robot", "make"), [("go2", _go2_state), ("ur5e", _ur5e_state)])
def test_state_messages_round_trip_through_cdr(robot: str, make, messages: StrictMessages) -> None:
    state = make()
    stamp_ns = 1_700_000_000_123_456_789
    out = conversions.state_messages(messages, robot, state, stamp_ns)
    assert [t for t, _ in out] == list(conversions.state_topics(robot))
    decoded = {}
    for topic, msg in out:
        assert msg.msgtype == conversions.topic_type(topic)  # the type each topic is declared with
        decoded[topic] = messages.roundtrip(msg)
        if hasattr(decoded[topic], "header"):
            assert decoded[topic].header.stamp.sec == 1_700_000_000
            assert decoded[topic].header.stamp.nanosec == 123_456_789
    back = conversions.state_from_messages(robot, decoded, timestamp=5.0)
    assert back.timestamp == 5.0 and back.joint_names == state.joint_names
    for field in (
        "joint_positions",
        "joint_velocities",
        "imu_quaternion",
        "imu_gyro",
        "imu_accel",
        "tool_pose",
        "tool_twist",
        "tool_wrench",
    ):
        expected = getattr(state, field)
        if expected is None:
            assert getattr(back, field) is None, field
        else:
            np.testing.assert_allclose(getattr(back, field), expected, err_msg=field)
    if robot == "go2":  # float32 on the wire
        np.testing.assert_allclose(back.foot_forces, state.foot_forces, rtol=1e-6)
        np.testing.assert_allclose(back.joint_torques, state.joint_torques)


def test_a_state_missing_what_the_topics_need_is_refused(messages: StrictMessages) -> None:
    state = _go2_state()
    state.foot_forces = None
    with pytest.raises(ValueError, match="foot_forces"):
        conversions.state_messages(messages, "go2", state, 0)
    with pytest.raises(KeyError, match="foot_forces"):
        conversions.state_from_messages("go2", {}, 0.0)


def test_tick_vectors_carry_their_tick_and_exact_values(messages: StrictMessages) -> None:
    values = np.array([0.1, -2.5, 3e-7], dtype=np.float32)
    label = conversions.TickLabel(tick=1234, stamp_ns=1_764_000_000_123_456_789, events=7)
    msg = conversions.tick_vector_msg(messages, values, "observation", label)
    decoded = messages.roundtrip(msg)
    assert conversions.tick_of(decoded) == label
    np.testing.assert_array_equal(conversions.vector_from_msg(decoded), values)
    hold = messages.roundtrip(conversions.vector_msg(messages, [], "hold"))
    assert conversions.vector_from_msg(hold).size == 0 and conversions.tick_of(hold) is None


def test_image_and_events(messages: StrictMessages) -> None:
    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    decoded = messages.roundtrip(conversions.image_msg(messages, 7, pixels))
    assert decoded.encoding == "rgb8" and decoded.step == 15
    np.testing.assert_array_equal(conversions.image_from_msg(decoded), pixels)
    event = messages.roundtrip(conversions.event_msg(messages, schema.EPISODE_END, tick=3, success=True))
    assert conversions.event_from_msg(event) == {"event": "episode_end", "tick": 3, "success": True}
    with pytest.raises(ValueError):
        conversions.event_from_msg(messages.roundtrip(conversions.string_msg(messages, "[1, 2]")))


def test_model_version_message(messages: StrictMessages) -> None:
    msg = messages.roundtrip(finetune_conversions.version_msg(messages, "/models/go2_slope", 3))
    assert finetune_conversions.version_from_msg(msg) == {
        "model_dir": "/models/go2_slope",
        "version": 3,
        "label": "v0003",
    }
    with pytest.raises(ValueError):
        finetune_conversions.version_from_msg(messages.roundtrip(conversions.string_msg(messages, "v3")))
    for bad in (
        '{"model_dir": "m", "version": null}',
        '{"model_dir": "m", "version": [3]}',
        '{"model_dir": "m", "version": "three"}',
        '{"model_dir": "m", "version": -1}',
    ):
        with pytest.raises(ValueError, match="version"):  # never a TypeError out of the planner's callback
            finetune_conversions.version_from_msg(messages.roundtrip(conversions.string_msg(messages, bad)))
    swap = conversions.string_msg(
        messages, json.dumps({"event": schema.MODEL_VERSION, "model_version": "v0003", "time_ns": 2_000})
    )
    assert finetune_conversions.confirms(swap, "v0003") and not finetune_conversions.confirms(swap, "v0004")
    # a rollback to v0003 is not confirmed by the planner's earlier swap to v0003, kept in the topic's history
    assert finetune_conversions.confirms(swap, "v0003", since_ns=2_000)
    assert not finetune_conversions.confirms(swap, "v0003", since_ns=2_001)


def test_every_topic_type_exists_in_both_distributions() -> None:
    for distro in ("humble", "jazzy"):
        types = StrictMessages(distro).typestore.types
        for topic in [*schema.TOPIC_TYPES, *conversions.LIVE_TOPIC_TYPES]:
            assert conversions.topic_type(topic) in types, (distro, topic)


def test_strict_messages_catch_wrong_fields_and_types(messages: StrictMessages) -> None:
    """The checker itself: a misspelt field, a numpy array where rclpy wants array.array, a float as uint32."""
    time_cls = messages("builtin_interfaces/msg/Time")
    with pytest.raises(AssertionError):
        time_cls(sec=1, nanosecs=2)
    with pytest.raises(AssertionError):
        time_cls(sec=1, nanosec=2.0)
    with pytest.raises(AssertionError):
        messages(schema.VECTOR_TYPE)(
            layout=messages("std_msgs/msg/MultiArrayLayout")(dim=[], data_offset=0),
            data=np.zeros(3, np.float32),
        )
