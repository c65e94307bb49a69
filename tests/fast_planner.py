"""A planner setting that costs a few ms per tick with the tiny model (runtime and ROS adapter tests)."""

FAST_PLANNER = {"num_samples": 8, "num_policy_samples": 2, "iterations": 1, "elites": 4}
