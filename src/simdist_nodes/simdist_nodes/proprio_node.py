"""`proprio_node`: the real robot's state on ROS topics, and its commands (see `simdist_nodes.robot_node`)."""

from simdist_nodes.robot_node import proprio_main as main

__all__ = ["main"]
