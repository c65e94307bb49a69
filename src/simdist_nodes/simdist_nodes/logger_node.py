"""`logger_node`: records the run as bag_dir/run_NN (rosbag2, the bag topic schema) through the core's BagWriter,
joining the planner's ticks with the robot's state (`simdist_nodes.bag_logger`). The bag is closed on shutdown."""

from __future__ import annotations

import time

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from simdist.bags import schema
from simdist.sim.config import load_task
from simdist_nodes import conversions
from simdist_nodes.bag_logger import TickLogger
from simdist_nodes.planner_io import joint_names_for
from simdist_nodes.ros_common import EVENTS, FRAMES, STATE_HISTORY, TICKS_RECORDED, declare, run_node


class LoggerNode(Node):
    def __init__(self) -> None:
        super().__init__("simdist_logger")
        task = declare(self, "task", "go2_slope", "task name (config/tasks/<task>.yaml)")
        bag_dir = declare(self, "bag_dir", "runs/bags", "folder that gets run_NN bags")
        storage = declare(self, "storage", "mcap", "bag storage: mcap or sqlite3")
        distro = declare(self, "distro", "jazzy", "bag metadata: jazzy or humble")
        camera = declare(self, "camera", False, "also record /simdist/camera/image_raw")
        info = {
            "task": task,
            "robot_spec": declare(self, "robot_spec", "", "what ran (sim:PROFILE, ur5e:IP, go2:IFACE)"),
            "model": declare(
                self, "model_dir", "", "the planner's checkpoint folder (finetune_dynamics reads it)"
            ),
            "recorder": "logger_node",
        }
        cfg = load_task(task)
        self.m = conversions.ros_messages()
        self.logger = TickLogger(
            bag_dir,
            robot=cfg.robot,
            joint_names=joint_names_for(cfg.robot),
            camera=camera,
            storage=storage,
            distro=distro,
            info=info,
        )
        group = MutuallyExclusiveCallbackGroup()  # one bag, written in order
        for topic in conversions.state_topics(cfg.robot):
            self.create_subscription(
                self.m(conversions.topic_type(topic)),
                topic,
                lambda msg, topic=topic: self.logger.on_state(topic, msg),
                STATE_HISTORY,
                callback_group=group,
            )
        for topic in (schema.OBSERVATION, schema.ACTION, schema.COMMAND):
            self.create_subscription(
                self.m(schema.VECTOR_TYPE),
                topic,
                lambda msg, topic=topic: self.logger.on_vector(topic, msg),
                TICKS_RECORDED,
                callback_group=group,
            )
        self.create_subscription(
            self.m(schema.EVENT_TYPE),
            schema.EVENTS,
            self.logger.on_event,
            TICKS_RECORDED,
            callback_group=group,
        )
        self.create_subscription(
            self.m(schema.EVENT_TYPE),
            conversions.ROBOT_EVENTS,
            self.logger.on_robot_event,
            EVENTS,
            callback_group=group,
        )
        if camera:
            self.create_subscription(
                self.m(schema.IMAGE_TYPE), schema.CAMERA, self.logger.on_image, FRAMES, callback_group=group
            )

    def on_shutdown(self) -> None:
        # Stopped together with the planner (a launch's Ctrl-C): its last ticks and final events are still on the
        # wire; wait until nothing new came for a moment (at most 2 s), then close.
        end = time.monotonic() + 2.0
        seen = -1
        while time.monotonic() < end and self.logger.received != seen:
            seen = self.logger.received
            time.sleep(0.3)
        path = self.logger.close()
        if path is not None:
            self.get_logger().info(
                f"bag {path}: {self.logger.written} ticks written, {self.logger.lost} lost (marked as gaps), "
                f"{self.logger.events_lost} events lost"
            )


def main(args: list[str] | None = None) -> int:
    return run_node(LoggerNode, name="simdist_logger", threads=1, on_shutdown="on_shutdown", args=args)
