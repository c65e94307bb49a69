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
