"""The tiny experiment's task, profile and overrides (shared by the fixtures and the tests)."""

TASK, PROFILE = "go2_slope", "ptfe"
# Half-second episodes: a few dozen steps each, so one point of 0.1 min (300 steps) spans several episodes.
OVERRIDES = {"episode_seconds": 0.5}
