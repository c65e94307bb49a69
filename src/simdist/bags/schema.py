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
# The task reward the robot side reported at a tick: earned by the previous tick's action (see `BagWriter.append`).
REWARD = f"{NAMESPACE}/reward"
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
    REWARD: VECTOR_TYPE,
    EVENTS: EVENT_TYPE,
}

# Every run carries these; `read_episodes` needs all four.
COMMON_TOPICS: tuple[str, ...] = (OBSERVATION, ACTION, COMMAND, EVENTS)

# The bag topic of each RobotState part a robot may measure (`simdist.robots.STATE_PARTS`) that bags record; the
# other parts (foot forces, the tool twist) are live only: the bag's observation vector already holds them. A run
# writes the joints and its robot's recorded parts (`robot_topics`); the camera when it records images.
PART_TOPICS: dict[str, str] = {"imu": IMU, "tool_wrench": WRENCH, "tool_pose": EE_POSE}

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
# The robot side's watchdog acted (no fresh command): `stage` "hold" or "safe_stop", `age_s` since the last one;
# or commands came back during a hold: `stage` "resume", `age_s` the outage's length.
WATCHDOG = "watchdog"


def robot_topics(robot: str) -> tuple[str, ...]:
    """What `robot` measures that its bags record: the joints, then its parts in the robot's order.

    Raises:
        ValueError: unknown robot (the message names the valid ones).
    """
    from simdist import robots
    from simdist.errors import ConfigError

    try:
        parts = robots.get(robot).state_parts
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return (JOINT_STATES, *(PART_TOPICS[p] for p in parts if p in PART_TOPICS))


def topics_for(robot: str, *, camera: bool = False, reward: bool = False) -> tuple[str, ...]:
    """All topics a run of `robot` writes, robot-specific ones first; the reward where the robot reports one.

    Raises:
        ValueError: unknown robot (the message names the valid ones).
    """
    extra = ((CAMERA,) if camera else ()) + ((REWARD,) if reward else ())
    return robot_topics(robot) + extra + COMMON_TOPICS
