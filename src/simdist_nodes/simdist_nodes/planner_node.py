"""`planner_node`: the core's DeployLoop on ROS 2 topics. Subscribes to the robot node's state, publishes the task
action on /simdist/robot_command (std_msgs/Float32MultiArray, the vector the model chose; empty = hold) and the
tick's /simdist/observation, /simdist/action, /simdist/command and /simdist/events for the logger.

One executor thread runs the sensing and model-version callbacks; control runs on its own paced thread (not an
rclpy timer: the executor's Python overhead per timer event cost more CPU than the tick), at the control rate on
the clock. The model is warmed up before control is enabled, and a warning is logged when the loop falls below
its rate. With `rt_priority` set, the control thread is put under SCHED_FIFO at its first tick (and the planner
thread one level below) until the node shuts down.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
from rclpy.node import Node
from simdist_finetune.conversions import transient_local_qos, version_from_msg

from simdist import robots
from simdist.bags import schema
from simdist.bags.writer import BagWriter
from simdist.errors import ConfigError
from simdist.plan.config import load_planner_configs, task_action_limits
from simdist.runtime.deploy import default_command, resolve_model
from simdist.runtime.ingest import CameraIngest
from simdist.runtime.loop import DeployLoop
from simdist.runtime.realtime import Scheduling, parse_cpus
from simdist.runtime.store import ModelStore
from simdist.sim.config import load_task
from simdist_nodes import conversions
from simdist_nodes.planner_io import RemoteActuator, TickPublisher, TopicRobot, joint_names_for
from simdist_nodes.ros_common import (
    COMMAND,
    EVENTS,
    FRAMES,
    STATE,
    TICKS,
    PacedThread,
    declare,
    run_node,
)

RATE_WARN_FACTOR = 1.5  # warn when a tick comes this many periods after the previous one


class PlannerNode(Node):
    def __init__(self) -> None:
        super().__init__("simdist_planner")
        task = declare(self, "task", "go2_slope", "task name (config/tasks/<task>.yaml)")
        model_dir = declare(self, "model_dir", "", "checkpoint folder (empty: models/<task>/)")
        planner = declare(self, "planner", "cpu", "planner preset (config/planner/<name>.yaml)")
        command = declare(
            self, "command", [0.0], "fixed task command; [0.0] = the robot node's or the default"
        )
        camera = declare(self, "camera", False, "feed /simdist/camera/image_raw to the model")
        warmup = declare(self, "warmup_plans", 5, "plans computed before control is enabled")
        poll_s = declare(self, "model_poll_s", 1.0, "how often dynamics/current is checked without a signal")
        rt_priority = declare(
            self,
            "rt_priority",
            0,
            "SCHED_FIFO priority of the control thread (planner: one below); 0: off",
        )
        cpus = declare(
            self, "cpus", "", "pin the control and planner threads to these CPUs, e.g. '2-3'; '': off"
        )
        lock_memory = declare(self, "lock_memory", False, "mlockall the process (needs memlock unlimited)")
        self.m = conversions.ros_messages()
        self.cfg = load_task(task)
        folder = resolve_model(task, Path(model_dir) if model_dir else None)
        self.store = ModelStore(folder, poll_s=poll_s).start()
        if self.store.model.obs_dim != robots.get(self.cfg.robot).proprio_dim:
            self.store.stop()
            raise ConfigError(
                f"model_dir {folder}: a model for {self.store.model.obs_dim} observations, not a {self.cfg.robot}"
            )
        self.period = 1.0 / self.cfg.control_hz
        joint_names = joint_names_for(self.cfg.robot)
        self.robot = TopicRobot(self.cfg.robot, joint_names, self.cfg.control_hz)
        fixed = np.asarray(command, dtype=np.float32) if len(command) > 1 else None
        self._fixed_command = fixed
        self._default_command = default_command(self.cfg)

        self._topics_out: dict[str, Any] = {}
        for topic in (
            schema.OBSERVATION,
            schema.ACTION,
            schema.COMMAND,
            schema.EVENTS,
            conversions.ROBOT_COMMAND,
        ):
            qos = COMMAND if topic == conversions.ROBOT_COMMAND else TICKS
            self._topics_out[topic] = self.create_publisher(self.m(conversions.topic_type(topic)), topic, qos)
        for topic in conversions.state_topics(self.cfg.robot):
            self.create_subscription(
                self.m(conversions.topic_type(topic)),
                topic,
                lambda msg, topic=topic: self.robot.on_state(topic, msg),
                STATE,
            )
        self.create_subscription(
            self.m(schema.VECTOR_TYPE),
            conversions.TASK_COMMAND,
            self.robot.on_task_command,
            STATE,
        )
        self.create_subscription(
            self.m(schema.EVENT_TYPE),
            conversions.ROBOT_EVENTS,
            self.robot.on_robot_event,
            EVENTS,
        )
        self.create_subscription(
            self.m(schema.EVENT_TYPE),
            conversions.MODEL_VERSION,
            self._on_model_version,
            transient_local_qos(),
        )
        camera_ingest = None
        if camera:
            self._image: np.ndarray | None = None
            self.create_subscription(self.m(schema.IMAGE_TYPE), schema.CAMERA, self._on_image, FRAMES)
            camera_ingest = CameraIngest(
                lambda: self._image, width=self.cfg.camera.width, height=self.cfg.camera.height
            )

        planner_cfg, adapted_cfg = load_planner_configs(
            planner, self.cfg.robot, {"horizon": self.store.model.horizon}, task=self.cfg.task
        )
        self.loop = DeployLoop(
            robot=self.robot,
            robot_kind=self.cfg.robot,
            actuator=RemoteActuator(self.m, self._publish),
            store=self.store,
            planner_config=planner_cfg,
            adapted_planner_config=adapted_cfg,  # granted when a hot swap brings adapted dynamics in
            limits=task_action_limits(self.cfg),
            command=self._command,
            control_hz=self.cfg.control_hz,
            bag=cast(BagWriter, TickPublisher(self.m, self._publish)),  # publishes what a bag would record
            camera=camera_ingest,
            realtime=True,
            scheduling=Scheduling(
                priority=rt_priority or None, cpus=parse_cpus(cpus), lock_memory=lock_memory
            ),
        )
        started = time.perf_counter()
        self.loop.open(warmup=warmup)
        self.get_logger().info(
            f"{task}: model {folder} ({self.store.label}) warmed up in {time.perf_counter() - started:.1f} s; "
            f"control at {self.cfg.control_hz:g} Hz once the robot's state arrives"
        )
        self._k = -1
        self._k0: int | None = None
        self._last_tick: float | None = None
        self._closing = False
        self.control = PacedThread(self.period, self._control_tick, "simdist-control").start()

    # -- callbacks ---------------------------------------------------------------------------------------------
    def _publish(self, topic: str, msg: Any) -> None:
        self._topics_out[topic].publish(msg)

    def _on_image(self, msg: Any) -> None:
        self._image = conversions.image_from_msg(msg)

    def _command(self) -> np.ndarray:
        if self._fixed_command is not None:
            return self._fixed_command.copy()
        from_robot = self.robot.command()
        return from_robot if from_robot is not None else self._default_command.copy()

    def _on_model_version(self, msg: Any) -> None:
        """A finetune announced a version: validate it (off the control thread); the next tick swaps it in."""
        try:
            announced = version_from_msg(msg)
        except ValueError as exc:
            self.get_logger().warning(f"model version message ignored: {exc}")
            return
        if Path(announced["model_dir"]).resolve() != self.store.folder.resolve():
            self.get_logger().warning(
                f"{announced['label']} is for {announced['model_dir']}, this planner uses {self.store.folder}"
            )
            return
        # validation loads the checkpoint: off the sensing callbacks, which must keep the state fresh
        threading.Thread(target=self._stage, args=(announced["label"],), daemon=True).start()

    def _stage(self, label: str) -> None:
        staged = self.store.check()
        self.get_logger().info(
            f"dynamics {label} announced; "
            + ("staged for the next tick" if staged is not None else "already in use, refused or staged")
        )

    def _control_tick(self, k: int, target: float) -> None:
        """One control period of the paced control thread (k counts periods since it started)."""
        if self._closing:
            return
        if self._k0 is None:
            if not self.robot.ready:
                self.get_logger().info("waiting for the robot node's state", throttle_duration_sec=5.0)
                return
            self._k0 = k
        tick = k - self._k0
        if self._k >= 0 and tick > self._k + 1:
            self.loop.stats.missed += tick - self._k - 1
        now = time.monotonic()
        if self._last_tick is not None and now - self._last_tick > RATE_WARN_FACTOR * self.period:
            self.get_logger().warning(
                f"control loop below rate: {1.0 / (now - self._last_tick):.1f} Hz of {self.cfg.control_hz:g} Hz "
                f"(missed {self.loop.stats.missed}, late {self.loop.stats.late})",
                throttle_duration_sec=5.0,
            )
        self._last_tick, self._k = now, tick
        self.loop.tick(tick, target + self.loop.deadline_fraction * self.period)

    def on_shutdown(self) -> None:
        self._closing = True
        self.control.stop()  # waits for a tick in flight; none starts after it
        self.loop.close()
        self.store.stop()
        s = self.loop.stats.summary()
        self.get_logger().info(
            f"ticks {s['ticks']}: fresh {s['fresh']}, late {s['late']}, held {s['held']}, missed {s['missed']}, "
            f"errors {s['errors']}, swaps {s['swaps']}; model {self.store.label}; {self.control.summary()}"
        )


def main(args: list[str] | None = None) -> int:
    # One executor thread for sensing and the model-version topic; control runs on its own paced thread.
    return run_node(PlannerNode, name="simdist_planner", threads=1, on_shutdown="on_shutdown", args=args)


if __name__ == "__main__":
    raise SystemExit(main())
