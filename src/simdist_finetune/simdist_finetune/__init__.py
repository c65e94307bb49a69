"""Finetune the dynamics on logged runs and announce the new version to the running planner."""
