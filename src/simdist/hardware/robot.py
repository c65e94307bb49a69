"""The `Robot` protocol every robot (MuJoCo-backed, UR5e, Go2) implements for the deploy loop."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from simdist.hardware.state import JointCommand, RobotState


@runtime_checkable
class Robot(Protocol):
    """A robot the deploy loop can read, command and stop.

    `send` is called once per control period with a command that already passed the `SafetyFilter`.
    `hold` keeps the robot where it is (the safe fallback when planning fails or data goes stale);
    `stop` brings it to rest and releases the connection; it must be safe to call twice.
    """

    control_hz: float
    joint_names: tuple[str, ...]

    def read(self) -> RobotState: ...

    def send(self, command: JointCommand) -> None: ...

    def hold(self) -> None: ...

    def stop(self) -> None: ...


# The name of a thread in which a driver disconnects, because the call may block in native code for good when the
# link is gone (ur_rtde's disconnect reconnects forever: `simdist.robots.ur5e.hardware.UR5eRobot.stop`).
DISCONNECT_THREAD = "robot-disconnect"


def leave_past_stuck_drivers(code: int) -> int:
    """Return `code`, or, where a driver thread is still blocked in native code, flush and end the process with it at
    once (`os._exit`). The interpreter's teardown would destroy that driver's objects under its blocked thread, and
    the process would then abort (SIGABRT) after a run that had ended, and stopped the robot, correctly."""
    import logging
    import os
    import sys
    import threading

    if not any(t.is_alive() and t.name == DISCONNECT_THREAD for t in threading.enumerate()):
        return code
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
