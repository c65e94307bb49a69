"""The nodes under rclpy (skipped where ROS 2 is not installed; run in the Docker image): the simulated Go2,
the planner and the logger on one executor produce control ticks and a run bag."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros
rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (ROS 2 tests run in the docker/ image)")


def test_sim_robot_planner_and_logger_nodes_record_a_run(model_for, tmp_path: Path) -> None:
    from rclpy.executors import MultiThreadedExecutor
    from simdist_nodes.logger_node import LoggerNode
    from simdist_nodes.planner_node import PlannerNode
    from simdist_nodes.robot_node import RobotNode

    from simdist.bags import read_episodes

    folder = model_for("go2_slope")
    bags = tmp_path / "bags"
    args = [
        "--ros-args",
        "-p",
        "task:=go2_slope",
        "-p",
        f"model_dir:={folder}",
        "-p",
        f"bag_dir:={bags}",
        "-p",
        "warmup_plans:=1",
    ]
    rclpy.init(args=args)
    try:
        robot = RobotNode("simdist_sim_robot", simulated=True)
        planner = PlannerNode()
        logger = LoggerNode()
        executor = MultiThreadedExecutor(num_threads=4)
        for node in (robot, planner, logger):
            executor.add_node(node)
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        planner.on_shutdown()
        for _ in range(20):  # let the last ticks reach the logger
            executor.spin_once(timeout_sec=0.05)
        logger.on_shutdown()
        robot.on_shutdown()
        assert planner.loop.stats.ticks > 20
        runs = sorted(bags.glob("run_*"))
        assert runs and sum(len(e["proprio"]) for e in read_episodes(runs[0])) > 10
    finally:
        rclpy.try_shutdown()
