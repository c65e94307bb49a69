"""Privileged experts: PPO (rsl-rl-lib) on the project's vector env, or the scripted peg expert; their checkpoints."""
