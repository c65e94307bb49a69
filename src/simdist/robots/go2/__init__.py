"""Unitree Go2: the description every layer asks, and the robot's one source of its constants.

- `sim`: the MuJoCo env of the Go2 tasks (go2_slope, go2_foam).
- `hardware`: the driver over unitree_sdk2py (CycloneDDS).
Proprio (35): gyro, projected gravity, joint positions relative to the stand pose, joint velocities, foot forces,
vertical specific force minus g. Action (12): joint offsets from the stand pose, scaled by the task's action_scale.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from simdist.errors import ConfigError
from simdist.hardware.state import RobotState
from simdist.paths import assets_dir
from simdist.robots import register
from simdist.robots.description import Evaluation, HardwareParameter, RobotDescription

if TYPE_CHECKING:
    from simdist.hardware.safety import SafetyLimits
    from simdist.runtime.actuation import Actuator
    from simdist.sim.config import CommandConfig, TaskConfig
    from simdist.sim.vec_env import SimVecEnv

LEGS = ("FR", "FL", "RR", "RL")
JOINT_NAMES: tuple[str, ...] = tuple(
    f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf")
)
# The standing pose (rad, Unitree order): the zero of the joint-position observation and of the actions.
STAND_POSE = np.array([0.0, 0.9, -1.8] * 4)
GRAVITY = 9.81  # m/s^2, as the env subtracts it from the vertical specific force
VELOCITY_LIMIT = 30.0  # rad/s, the Go2 motors' no-load speed
PROPRIO_DIM = 35


@functools.cache
def joint_limits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper) joint range and torque limits (Unitree order) from the project's Go2 MJCF, the one source."""
    model = mujoco.MjModel.from_xml_path(str(assets_dir() / "go2.xml"))
    return (
        model.jnt_range[1:, 0].copy(),
        model.jnt_range[1:, 1].copy(),
        model.actuator_forcerange[:, 1].copy(),
    )


def safety_limits(*, max_step: float = 0.3) -> SafetyLimits:
    """Safety limits for the Go2: joint range, 0.3 rad per tick (more than the planner's 0.25), motor limits."""
    from simdist.hardware.safety import SafetyLimits

    lower, upper, torque = joint_limits()
    return SafetyLimits(
        position_lower=lower,
        position_upper=upper,
        max_step=max_step,
        velocity_limit=VELOCITY_LIMIT,
        torque_limit=torque,
        stale_after_s=0.1,
    )


def parse_address(address: str, *, domain: int) -> tuple[str | None, int]:
    """`IFACE[:DOMAIN]` -> (interface or None, DDS domain; `domain` when not given); a bad domain is one line."""
    iface, _, given = address.partition(":")
    if given and not given.isdigit():
        raise ConfigError(f"Go2 address '{address}': the DDS domain after ':' must be an integer")
    return iface or None, int(given) if given else domain


class Go2(RobotDescription):
    name = "go2"
    joint_names = JOINT_NAMES
    proprio_dim = PROPRIO_DIM
    action_dim = 12
    command_dim = 3
    control_hz = 50.0
    action_clip = 4.0
    state_parts = ("imu", "foot_forces")
    camera = "track"
    holds_last_action = True  # joint targets: holding is repeating the last ones
    can_damp = True
    address = "IFACE[:DOMAIN]"
    metric_key = "progress_m"
    metric = "forward progress (m)"
    summary_key = "progress_m"
    velocity_index = slice(35, 38)  # body-frame base velocity in the env's privileged observation
    default_episodes = 5  # per commanded speed
    hardware_parameters = (
        HardwareParameter(
            "network_interface", "eth0", "the Ethernet interface wired to the Go2", "network_interface"
        ),
        HardwareParameter("domain_id", 0, "the Go2's DDS domain (0 on a stock robot)", "go2_domain_id"),
    )

    def proprio(self, state: RobotState) -> np.ndarray:
        """(35,) float32: gyro, projected gravity, joint pos - stand, joint vel, foot forces, accel_z - g."""
        self.require(state)
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, np.asarray(state.imu_quaternion, dtype=np.float64))
        gravity = -rot.reshape(3, 3)[2, :]  # world -z in the body frame: R^T (0, 0, -1)
        parts = (
            state.imu_gyro,
            gravity,
            state.joint_positions - STAND_POSE,
            state.joint_velocities,
            state.foot_forces,
            np.asarray(state.imu_accel)[2:3] - GRAVITY,
        )
        return np.concatenate(parts).astype(np.float32)

    def env_class(self) -> type[SimVecEnv]:
        from simdist.robots.go2.sim import Go2Env

        return Go2Env

    def evaluation(self, cfg: TaskConfig, episodes: int | None = None) -> Evaluation:
        """Every evaluation speed (forward, m/s) for `episodes` episodes each (default 5)."""
        per = episodes or self.default_episodes
        speeds = cfg.command.eval_speeds or [0.5]
        commands = [[s, 0.0, 0.0] for s in speeds for _ in range(per)]
        description = (
            f"{len(speeds)} commanded speeds ({', '.join(f'{s:g}' for s in speeds)} m/s) x {per} episodes"
        )
        return Evaluation(commands, len(commands), self.metric_key, self.metric, description)

    def default_command(self, cfg: TaskConfig) -> np.ndarray:
        """The middle evaluation speed, straight ahead."""
        speeds = cfg.command.eval_speeds or [0.5]
        return np.array([speeds[len(speeds) // 2], 0.0, 0.0], dtype=np.float32)

    def command_range(self, command: CommandConfig) -> tuple[np.ndarray, np.ndarray]:
        """Forward speed, lateral speed and yaw rate as the pretraining drew them (the task's ranges)."""
        ranges = (command.speed_range, command.lateral_range, command.yaw_rate_range)
        return np.array([r[0] for r in ranges]), np.array([r[1] for r in ranges])

    def summarize(self, metrics: Sequence[dict[str, float]]) -> dict[str, float]:
        progress = np.array([m["progress_m"] for m in metrics])
        commanded = np.array([m["commanded_m"] for m in metrics])
        return {
            "progress_m": float(progress.mean()),
            "commanded_m": float(commanded.mean()),
            "progress_fraction": float(progress.sum() / max(commanded.sum(), 1e-9)),
            "fall_rate": float(np.mean([m["fell"] for m in metrics])),
        }

    def connect(self, address: str, cfg: TaskConfig) -> Any:
        from simdist.robots.go2.hardware import Go2Robot

        iface, domain = parse_address(address, domain=0)
        return Go2Robot.connect(iface, domain, control_hz=cfg.control_hz)

    def emulator(
        self, cfg: TaskConfig, profile: str, address: str, *, seed: int = 0, faults: Sequence[str] = ()
    ) -> Any:
        """The MuJoCo Go2 on rt/lowstate and rt/lowcmd at `IFACE[:DOMAIN]` (default lo:1); `faults` as
        `KIND:START_S:DURATION_S` (`simdist.hardware.emulated_faults.Fault`)."""
        from simdist.hardware.emulated_faults import parse_faults
        from simdist.robots.go2.emulator import Go2Emulator

        iface, domain = parse_address(address or "lo:1", domain=1)
        parsed = parse_faults(tuple(faults))
        return Go2Emulator(cfg, profile, iface=iface or "lo", domain=domain, seed=seed, faults=parsed)

    def actuator(self, robot: Any, cfg: TaskConfig, command: Callable[[], np.ndarray]) -> Actuator:
        from simdist.hardware.safety import SafetyFilter
        from simdist.runtime.actuation import JointActuator

        lower, upper, _ = joint_limits()
        # the hardware adapter's PD gains (Go2Robot.kp / kd), so the filter bounds the torque they imply
        gains = [getattr(robot, name, None) for name in ("kp", "kd")]
        kp, kd = (np.full(len(STAND_POSE), float(g)) if isinstance(g, int | float) else None for g in gains)
        return JointActuator(
            robot,
            action_scale=cfg.action_scale,
            safety=SafetyFilter(safety_limits(), cfg.control_hz),
            stand_pose=STAND_POSE,
            lower=lower,
            upper=upper,
            kp=kp,
            kd=kd,
        )


ROBOT = register(Go2())
