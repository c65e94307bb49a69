"""The bag topic schema: the one place that names SimDist's topics, their message types and who uses them.

The same names are used on ROS 2 and in bags, and only standard message types appear, so `ros2 bag play` of a
run reproduces the deployment's topics for any ROS 2 tool.
"""

from __future__ import annotations

# Bumped when a topic's meaning or an event's fields change; written into every run's `run_start` event.
SCHEMA_VERSION = 1

NAMESPACE = "/simdist"

JOINT_STATES = f"{NAMESPACE}/joint_states"
IMU = f"{NAMESPACE}/imu"
WRENCH = f"{NAMESPACE}/wrench"
EE_POSE = f"{NAMESPACE}/ee_pose"
CAMERA = f"{NAMESPACE}/camera/image_raw"
COMMAND = f"{NAMESPACE}/command"
OBSERVATION = f"{NAMESPACE}/observation"
ACTION = f"{NAMESPACE}/action"
EVENTS = f"{NAMESPACE}/events"

# Message types as rosbags' typestore names them (package/msg/Type).
JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
IMU_TYPE = "sensor_msgs/msg/Imu"
WRENCH_TYPE = "geometry_msgs/msg/WrenchStamped"
POSE_TYPE = "geometry_msgs/msg/PoseStamped"
IMAGE_TYPE = "sensor_msgs/msg/Image"
VECTOR_TYPE = "std_msgs/msg/Float32MultiArray"
EVENT_TYPE = "std_msgs/msg/String"

TOPIC_TYPES: dict[str, str] = {
    JOINT_STATES: JOINT_STATE_TYPE,
    IMU: IMU_TYPE,
    WRENCH: WRENCH_TYPE,
    EE_POSE: POSE_TYPE,
    CAMERA: IMAGE_TYPE,
    COMMAND: VECTOR_TYPE,
    OBSERVATION: VECTOR_TYPE,
    ACTION: VECTOR_TYPE,
    EVENTS: EVENT_TYPE,
}

# Every run carries these; `read_episodes` needs all four.
COMMON_TOPICS: tuple[str, ...] = (OBSERVATION, ACTION, COMMAND, EVENTS)

# What each robot measures, beyond the common topics. The camera is added when a run records images.
ROBOT_TOPICS: dict[str, tuple[str, ...]] = {
    "go2": (JOINT_STATES, IMU),
    "ur5e": (JOINT_STATES, WRENCH, EE_POSE),
}

# Event kinds carried as JSON in std_msgs/String on EVENTS; every event has "event" and "time_ns".
RUN_START = "run_start"
RUN_END = "run_end"
EPISODE_START = "episode_start"
EPISODE_END = "episode_end"
MODEL_VERSION = "model_version"
# Control ticks that are not in the bag although they happened: `ticks` of them, before the next tick written.
# `reason` "missed": the controller skipped control periods (late); "lost": the recorder never got them.
# The reader never joins the steps on either side of a gap into one stretch (`segment` changes).
TICKS_GAP = "ticks_gap"
# The robot side's watchdog acted (no fresh command): `stage` "hold" or "safe_stop", `age_s` since the last one.
WATCHDOG = "watchdog"


def topics_for(robot: str, *, camera: bool = False) -> tuple[str, ...]:
    """All topics a run of `robot` writes, robot-specific ones first.

    Raises:
        ValueError: unknown robot (the message names the valid ones).
    """
    if robot not in ROBOT_TOPICS:
        raise ValueError(f"unknown robot '{robot}' (valid: {', '.join(sorted(ROBOT_TOPICS))})")
    extra = (CAMERA,) if camera else ()
    return ROBOT_TOPICS[robot] + extra + COMMON_TOPICS
