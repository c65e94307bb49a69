"""The two robot nodes, one `RobotBridge` each: `sim_robot_node` (the MuJoCo robot under a dynamics profile,
standing in for hardware) and `proprio_node` (the real robot through its core adapter: ur_rtde for the UR5e,
unitree_sdk2py for the Go2). Both publish the state topics at the control rate and execute /simdist/robot_command;
only one process can own a robot connection, so the node that reads the robot also commands it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rclpy.node import Node

from simdist import robots
from simdist.bags import schema
from simdist.errors import ConfigError
from simdist.runtime.deploy import default_command, make_actuator, make_robot
from simdist.sim.config import load_task
from simdist_nodes import conversions
from simdist_nodes.robot_bridge import RobotBridge
from simdist_nodes.ros_common import COMMAND, EVENTS, FRAMES, STATE, PacedThread, declare, now_ns, run_node


class RobotNode(Node):
    def __init__(self, name: str, *, simulated: bool) -> None:
        super().__init__(name)
        task = declare(self, "task", "go2_slope", "task name (config/tasks/<task>.yaml)")
        self.cfg = load_task(task)
        if simulated:
            profile = declare(
                self, "profile", "sim", "dynamics profile of the simulated robot (e.g. ptfe, foam, real)"
            )
            seed = declare(self, "seed", 0, "simulation seed")
            spec = f"sim:{profile}"
        else:
            spec = self._hardware_spec()
        command = declare(
            self, "command", [0.0], "fixed task command; [0.0] = the sim's episode command or the default"
        )
        watchdog_s = declare(
            self,
            "watchdog_s",
            max(5.0 / self.cfg.control_hz, 0.1),
            "hold the robot when no command came for this long (s)",
        )
        stop_s = declare(
            self,
            "stop_s",
            1.0,
            "then stop it safely (Go2: damping mode; UR5e: servoStop) when none came for this long (s)",
        )
        if not 0.0 < watchdog_s <= stop_s:
            raise ConfigError(f"watchdog_s ({watchdog_s}) must be > 0 and at most stop_s ({stop_s})")
        self.m = conversions.ros_messages()
        self.robot = make_robot(spec, self.cfg, seed=seed if simulated else 0, realtime=True)
        if hasattr(self.robot, "start"):
            self.robot.start()  # the simulated physics thread runs at the control rate, like a servo loop
        if len(command) > 1:
            fixed = np.asarray(command, dtype=np.float32)
            command_fn = fixed.copy
        elif hasattr(self.robot, "command"):
            command_fn = self.robot.command
        else:
            fixed = default_command(self.cfg)
            command_fn = fixed.copy
        # Hardware always goes through joint targets / servoL with the safety filter; the sim takes the action.
        actuator = make_actuator(self.robot, self.cfg, command_fn, safety=not simulated)
        self._topics_out: dict[str, Any] = {}
        topics = [
            *conversions.state_topics(self.cfg.robot),
            conversions.TASK_COMMAND,
            conversions.ROBOT_EVENTS,
        ]
        self.camera = simulated and bool(self.cfg.camera.enabled)
        if self.camera:
            topics.append(schema.CAMERA)
        qos = {conversions.ROBOT_EVENTS: EVENTS, schema.CAMERA: FRAMES}
        for topic in topics:
            self._topics_out[topic] = self.create_publisher(
                self.m(conversions.topic_type(topic)), topic, qos.get(topic, STATE)
            )
        self.bridge = RobotBridge(
            self.m,
            self._publish,
            robot=self.robot,
            robot_kind=self.cfg.robot,
            actuator=actuator,
            command=command_fn,
            watchdog_s=watchdog_s,
            stop_s=stop_s,
        )
        self.create_subscription(
            self.m(schema.VECTOR_TYPE), conversions.ROBOT_COMMAND, self.bridge.on_command, COMMAND
        )
        # State goes out on a paced thread of its own, not an rclpy timer (see PacedThread).
        self.state_thread = PacedThread(1.0 / self.cfg.control_hz, self._on_period, "simdist-state").start()
        self.get_logger().info(f"{task} on {spec}: publishing state at {self.cfg.control_hz:g} Hz")

    def _hardware_spec(self) -> str:
        robot = robots.get(self.cfg.robot)
        values = {p.name: declare(self, p.name, p.default, p.description) for p in robot.hardware_parameters}
        return f"{robot.name}:{robot.hardware_address(values)}"

    def _publish(self, topic: str, msg: Any) -> None:
        self._topics_out[topic].publish(msg)

    def _on_period(self, k: int, target: float) -> None:
        stamp = now_ns(self)
        try:
            self.bridge.publish_state(stamp)
            if self.camera and (image := self.bridge.image(stamp)) is not None:
                self._publish(schema.CAMERA, image)
        except Exception as exc:  # a failing read is reported, the watchdog below still runs
            self.get_logger().error(f"reading the robot failed: {exc!r}", throttle_duration_sec=2.0)
        self.bridge.check_watchdog()

    def on_shutdown(self) -> None:
        b = self.bridge
        self.get_logger().info(
            f"commands {b.commands} over {b.command_span_s:.2f} s, hold requests {b.hold_requests}, holds {b.holds}, "
            f"watchdog stage {b.stage or 'none'}, refused {b.refused}"
        )
        self.state_thread.stop()
        self.bridge.shutdown(self.robot.stop)


def sim_main(args: list[str] | None = None) -> int:
    return run_node(
        lambda: RobotNode("simdist_sim_robot", simulated=True),
        name="simdist_sim_robot",
        threads=1,
        on_shutdown="on_shutdown",
        args=args,
    )


def proprio_main(args: list[str] | None = None) -> int:
    return run_node(
        lambda: RobotNode("simdist_proprio", simulated=False),
        name="simdist_proprio",
        threads=1,
        on_shutdown="on_shutdown",
        args=args,
    )
