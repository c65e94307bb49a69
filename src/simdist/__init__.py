"""SimDist: pretrain a world model in simulation, adapt only its dynamics on the real robot."""

import os as _os

# MuJoCo picks its OpenGL backend when it is first imported. Without a display, GLFW cannot open a window and
# offscreen rendering (`simdist render`, the camera) fails; EGL renders headless (Mesa's llvmpipe on a CPU).
if (
    "MUJOCO_GL" not in _os.environ
    and not _os.environ.get("DISPLAY")
    and not _os.environ.get("WAYLAND_DISPLAY")
):
    _os.environ["MUJOCO_GL"] = "egl"
    _os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

__version__ = "0.1.0"
