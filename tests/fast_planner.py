"""A planner setting that costs a few ms per tick with the tiny model (runtime and ROS adapter tests); 4 policy
samples, so that a task whose planner leads the policy chunk by up to 3 steps (go2_slope) takes it too."""

FAST_PLANNER = {"num_samples": 8, "num_policy_samples": 4, "iterations": 1, "elites": 4}
