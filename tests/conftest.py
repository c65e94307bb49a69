"""Shared test setup: offscreen rendering and a single torch thread (the CI machine has 2 cores)."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
