"""`sim_robot_node`: the MuJoCo robot under a dynamics profile, standing in for hardware (see `robot_node`)."""

from simdist_nodes.robot_node import sim_main as main

__all__ = ["main"]
