"""A planner setting that costs a few ms per tick with the tiny model (runtime and ROS adapter tests); 8 policy
samples: as many as a task's planner may offer policy chunks (up to 3 leads for 2 commands) takes."""

FAST_PLANNER = {"num_samples": 8, "num_policy_samples": 8, "iterations": 1, "elites": 4}
