"""A planner setting that costs a few ms per tick with the tiny model (runtime and ROS adapter tests); 8 policy
samples: a task whose planner offers the policy chunk at up to 3 leads for 2 commands (go2_slope) takes it too."""

FAST_PLANNER = {"num_samples": 8, "num_policy_samples": 8, "iterations": 1, "elites": 4}
