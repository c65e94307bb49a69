"""Universal Robots UR5e with a peg on the flange: the description every layer asks, and its constants.

- `sim`: the MuJoCo env of the peg task (ur5e_peg), with the servo's IK at the physics rate.
- `search`: the scripted search controller (the peg's expert without training).
- `actuation`: tool deltas -> a tool pose target (servoL on the arm).
- `hardware`: the driver over RTDE (ur_rtde).
Proprio (31): joint positions and velocities, the peg tip's position, the flange quaternion (`flange_quat`), the tool
twist and the wrench. Action (4): tool deltas (x, y, z, yaw), scaled by the task's peg.action_scale_m/_rad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simdist.errors import ConfigError
from simdist.hardware.state import RobotState
from simdist.robots import register
from simdist.robots.description import HardwareParameter, RobotDescription

if TYPE_CHECKING:
    from simdist.runtime.actuation import Actuator
    from simdist.sim.config import TaskConfig
    from simdist.sim.vec_env import SimVecEnv

JOINT_NAMES: tuple[str, ...] = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
)
PROPRIO_DIM = 31
# The tool target's workspace: a box around the hole estimate, from just below the hole floor to 25 cm above it.
WORKSPACE_HALF_XY = 0.12
WORKSPACE_ABOVE = 0.25
WORKSPACE_BELOW_FLOOR = 0.01


# The flange quaternion with the tool pointing down (yaw 0): a half turn about x, so w is about 0 there. A quaternion
# is taken in the hemisphere of this one (q . FLANGE_DOWN >= 0): with the tool down, any yaw within a half turn, the
# sign is far from its switch, where "w >= 0" switched at random with the noise (the sign of x, y, z drawn afresh
# every few steps until 2026-12-07).
FLANGE_DOWN = np.array([0.0, 1.0, 0.0, 0.0])


def flange_quat(quat: np.ndarray) -> np.ndarray:
    """(..., 4) quaternions (w, x, y, z) of the flange, each signed into FLANGE_DOWN's hemisphere."""
    quat = np.asarray(quat, dtype=np.float64)
    return quat * np.where(quat @ FLANGE_DOWN < 0, -1.0, 1.0)[..., None]


def workspace(hole: np.ndarray, hole_depth: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) corners of the tool target's box for hole positions `hole` (..., 3)."""
    hole = np.asarray(hole, dtype=np.float64)
    low = hole - np.array([WORKSPACE_HALF_XY, WORKSPACE_HALF_XY, hole_depth + WORKSPACE_BELOW_FLOOR])
    high = hole + np.array([WORKSPACE_HALF_XY, WORKSPACE_HALF_XY, WORKSPACE_ABOVE])
    return low, high


class UR5e(RobotDescription):
    name = "ur5e"
    joint_names = JOINT_NAMES
    proprio_dim = PROPRIO_DIM
    action_dim = 4
    command_dim = 4
    control_hz = 10.0
    action_clip = 1.0
    state_parts = ("tool_wrench", "tool_pose", "tool_twist")
    camera = "front"
    holds_last_action = False  # tool deltas: holding is moving by zero
    can_damp = False  # its safe stop is a hold (servoStop on the arm)
    address = "HOST"
    metric_key = "success"
    metric = "success rate"
    summary_key = "success_rate"
    default_episodes = 20
    hardware_parameters = (
        HardwareParameter(
            "robot_ip", "192.168.1.102", "the UR5e controller's address (RTDE, TCP 30004)", "robot_ip"
        ),
    )

    def proprio(self, state: RobotState) -> np.ndarray:
        """(31,) float32: joint pos, joint vel, tool (peg tip) position, flange quaternion, twist, wrench."""
        self.require(state)
        pose = np.asarray(state.tool_pose, dtype=np.float64)
        quat = flange_quat(pose[3:7])  # q and -q are one rotation: the env's sign
        parts = (
            state.joint_positions,
            state.joint_velocities,
            pose[:3],
            quat,
            state.tool_twist,
            state.tool_wrench,
        )
        return np.concatenate(parts).astype(np.float32)

    def env_class(self) -> type[SimVecEnv]:
        from simdist.robots.ur5e.sim import PegEnv

        return PegEnv

    def default_command(self, cfg: TaskConfig) -> np.ndarray:
        """The nominal hole pose (position, yaw 0)."""
        return np.array([*cfg.peg.hole_center, 0.0], dtype=np.float32)

    def summarize(self, metrics: Sequence[dict[str, float]]) -> dict[str, float]:
        return {"success_rate": float(np.mean([m["success"] for m in metrics]))}

    def scripted_expert(self, cfg: TaskConfig) -> Callable[[dict[str, np.ndarray]], np.ndarray] | None:
        """The search controller (spiral search around the hole estimate, then insert), at full gain."""
        from simdist.robots.ur5e.search import search_action

        def act(obs: dict[str, np.ndarray]) -> np.ndarray:
            return search_action(
                obs["proprio"], obs["command"], 1.0, cfg.peg.action_scale_m, cfg.peg.action_scale_rad
            )

        return act

    def connect(self, address: str, cfg: TaskConfig) -> Any:
        from simdist.robots.ur5e.hardware import UR5eRobot

        # the TCP is the peg tip, the peg's length in front of the flange's F/T sensor
        return UR5eRobot.connect(
            address, control_hz=cfg.control_hz, tcp_offset_m=2.0 * cfg.peg.peg_half_length
        )

    def emulator(
        self, cfg: TaskConfig, profile: str, address: str, *, seed: int = 0, faults: Sequence[str] = ()
    ) -> Any:
        """The MuJoCo UR5e behind RTDE (30004), the dashboard (29999) and the script ports on HOST (e.g.
        127.0.0.1, given explicitly): ur_rtde's ports are fixed, so the address is a host only (one emulator per
        loopback address). `faults`: `KIND:START_S:DURATION_S` (`simdist.hardware.emulated_faults.Fault`)."""
        from simdist.hardware.emulated_faults import parse_faults
        from simdist.robots.ur5e.emulator import UR5eEmulator, parse_host

        host = parse_host(address)
        return UR5eEmulator(cfg, profile, host=host, seed=seed, faults=parse_faults(tuple(faults)))

    def actuator(self, robot: Any, cfg: TaskConfig, command: Callable[[], np.ndarray]) -> Actuator:
        from simdist.robots.ur5e.actuation import CartesianActuator, ToolTarget

        if not hasattr(robot, "send_tool_pose"):
            raise ConfigError(
                f"robot {type(robot).__name__} has no Cartesian path for the {cfg.task} task's tool deltas"
            )
        tool = ToolTarget(
            scale_m=cfg.peg.action_scale_m, scale_rad=cfg.peg.action_scale_rad, hole_depth=cfg.peg.hole_depth
        )
        return CartesianActuator(robot, tool, command=command, press_limit_n=cfg.peg.press_limit_n)


ROBOT = register(UR5e())
