"""`RobotDescription`: everything the layers need to know about one robot, in one object.

The runtime, planner, deploy, adapt, the ROS nodes and the experiment ask the task's robot (`simdist.robots.get`)
instead of naming it. A robot is one module (or package) that defines a subclass and registers one instance;
`simdist.robots.go2` and `simdist.robots.ur5e` are the two that ship, and docs/adding_a_robot.md walks through a
third one (the cart-pole of tests/robots/cartpole).

Heavy parts (the MuJoCo env, the vendor drivers, the actuators) are imported inside the methods, so describing a
robot costs nothing on a machine that only reads bags.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simdist.errors import ConfigError
from simdist.hardware.state import RobotState

if TYPE_CHECKING:
    from simdist.runtime.actuation import Actuator
    from simdist.sim.config import CommandConfig, TaskConfig
    from simdist.sim.vec_env import SimVecEnv

# The parts of a RobotState beyond the joints that a robot may measure, with the RobotState fields each one fills.
# The bag schema and the ROS conversions map each part to its topic; a robot lists the parts it has.
STATE_PARTS: dict[str, tuple[str, ...]] = {
    "imu": ("imu_quaternion", "imu_gyro", "imu_accel"),
    "foot_forces": ("foot_forces",),
    "tool_pose": ("tool_pose",),
    "tool_twist": ("tool_twist",),
    "tool_wrench": ("tool_wrench",),
}


@dataclass(frozen=True)
class HardwareParameter:
    """One part of a hardware address, as a ROS parameter of the proprio node and a launch argument."""

    name: str  # the node's parameter
    default: Any  # its default; its type is the parameter's
    description: str
    launch_arg: str  # the launch argument that sets it


@dataclass(frozen=True)
class Evaluation:
    """How a task on this robot is evaluated: the commands of successive episodes (None: the env's own), how many
    episodes, and the per-episode metric (key in the env's `final_metrics`) with its name and a description."""

    commands: list[list[float]] | None
    episodes: int
    metric_key: str
    metric: str
    description: str


class RobotDescription:
    """One robot. Subclasses set the class attributes and implement what their robot has.

    Attributes:
        name: the registry name, as task YAMLs write it (`robot: go2`).
        joint_names: the joints in the order the model, the env and the driver use.
        proprio_dim: length of the proprio vector `proprio()` builds (the env's `proprio` observation).
        action_dim, command_dim: sizes of the task action and the task command.
        state_parts: the RobotState parts beyond the joints it measures (keys of `STATE_PARTS`).
        camera: the MJCF camera that renders and videos look through.
        holds_last_action: a hold repeats the last task action (joint targets) instead of a zero action (deltas).
        can_damp: the robot has a motor damping mode (the escalation after a hold when the planner is lost).
        address: how a hardware address is written after `<name>:` (for messages), or "" without a driver.
        metric_key, metric: the evaluation's per-episode metric (a key of the env's final metrics) and its name.
        velocity_index: where the base velocity sits in the env's privileged observation, or None.
    """

    name: str = ""
    joint_names: tuple[str, ...] = ()
    proprio_dim: int = 0
    action_dim: int = 0
    command_dim: int = 0
    control_hz: float = 0.0  # nominal (the shipped tasks'; a task YAML sets its own)
    action_clip: float = 1.0  # nominal, likewise
    state_parts: tuple[str, ...] = ()
    camera: str = ""
    holds_last_action: bool = False
    can_damp: bool = False
    address: str = ""
    metric_key: str = "success"
    metric: str = "success rate"
    summary_key: str = "success"  # the figure `summarize` reports the metric under
    velocity_index: slice | None = None
    hardware_parameters: tuple[HardwareParameter, ...] = ()  # what `hardware_address` is built from
    default_episodes: int = 20
    tasks_dir: Path | None = None  # task YAMLs that come with the robot (found by name like config/tasks)

    # -- the model's side: measurement -> observation -------------------------------------------------------
    def proprio(self, state: RobotState) -> np.ndarray:
        """The proprio vector of one measurement, exactly the layout of the env's `proprio` (float32)."""
        raise NotImplementedError

    def require(self, state: RobotState) -> None:
        """Raise ValueError naming the fields this robot's proprio needs and the state lacks."""
        names = [f for part in self.state_parts for f in STATE_PARTS[part]]
        missing = [n for n in names if getattr(state, n) is None]
        if missing:
            raise ValueError(f"{self.name} proprio needs {', '.join(missing)} in the RobotState")

    # -- the simulator ------------------------------------------------------------------------------------------
    def env_class(self) -> type[SimVecEnv]:
        """The MuJoCo vector env of this robot's tasks (a `SimVecEnv` that also implements `measure`)."""
        raise NotImplementedError

    # -- tasks ---------------------------------------------------------------------------------------------------
    def evaluation(self, cfg: TaskConfig, episodes: int | None = None) -> Evaluation:
        """The task's evaluation protocol; default: `episodes` (or `default_episodes`) of the env's own commands."""
        count = episodes or self.default_episodes
        return Evaluation(None, count, self.metric_key, self.metric, f"{count} episodes")

    def default_command(self, cfg: TaskConfig) -> np.ndarray:
        """The task command a hardware run gets without --command."""
        raise NotImplementedError

    def command_range(self, command: CommandConfig) -> tuple[np.ndarray, np.ndarray] | None:
        """(low, high) per command dimension: the commands the pretraining drew (what the base policy knows), in
        raw units; None where the command is not a setpoint a planner may scale (the default)."""
        return None

    def summarize(self, metrics: Sequence[dict[str, float]]) -> dict[str, float]:
        """Evaluation figures of finished episodes' metrics (an expert's evaluation); default: the metric's mean."""
        return {self.metric_key: float(np.mean([m[self.metric_key] for m in metrics]))}

    def scripted_expert(self, cfg: TaskConfig) -> Callable[[dict[str, np.ndarray]], np.ndarray] | None:
        """A controller that needs no training (observation dict -> actions), if the robot's tasks have one."""
        return None

    # -- hardware --------------------------------------------------------------------------------------------------
    def connect(self, address: str, cfg: TaskConfig) -> Any:
        """The hardware driver for `<name>:<address>` (behind the `Robot` protocol)."""
        raise ConfigError(f"robot {self.name} has no hardware driver (run it as sim:PROFILE)")

    def hardware_address(self, values: dict[str, Any]) -> str:
        """The address `connect` takes, from the values of `hardware_parameters` (default: them joined by ':')."""
        return ":".join(str(values[p.name]) for p in self.hardware_parameters)

    def actuator(self, robot: Any, cfg: TaskConfig, command: Callable[[], np.ndarray]) -> Actuator:
        """Task actions -> this robot's commands on the hardware path (safety filter included)."""
        raise ConfigError(f"robot {self.name} has no hardware actuator (run it as sim:PROFILE)")

    def emulator(self, cfg: TaskConfig, profile: str, address: str, *, seed: int = 0) -> Any:
        """This robot simulated behind its own hardware protocol at `address` (what `connect` reaches), with
        `serve(stop, seconds) -> summary` and `close()`; `simdist emulate` runs it."""
        raise ConfigError(f"robot {self.name} has no emulator")

    def hold_action(self, last_action: np.ndarray | None, act_dim: int) -> np.ndarray:
        """The task action that keeps the robot where it is."""
        if self.holds_last_action and last_action is not None:
            return np.array(last_action, dtype=np.float32, copy=True)
        return np.zeros(act_dim, dtype=np.float32)

    def __repr__(self) -> str:
        return f"<robot {self.name}>"
