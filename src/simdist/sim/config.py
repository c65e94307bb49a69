"""Typed task configuration: config/tasks/<task>.yaml, dynamics profiles and `--set` overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simdist.config import apply_overrides, build, read_yaml
from simdist.errors import ConfigError
from simdist.paths import config_dir

# The dynamics parameters a profile may fix and the randomisation may draw. One place names them all.
DYNAMICS_PARAMS: dict[str, str] = {
    "friction": "sliding friction of the contact that matters (foot-ground, peg-hole)",
    "base_mass_add": "kg added to the base (Go2 trunk) or the peg",
    "kp_scale": "scale of the servo stiffness",
    "kd_scale": "scale of the servo damping",
    "joint_friction": "N m of dry joint friction (frictionloss)",
    "joint_damping": "N m s/rad of joint damping",
    "latency_steps": "control steps of action delay (integer)",
    "servo_lag": "time constant (s) of a first-order lag on the joint targets",
    "ground_timeconst": "contact time constant (s) of the ground: larger is softer",
    "ground_dampratio": "contact damping ratio of the ground: >1 absorbs energy",
    "sensor_noise_scale": "scale of the configured sensor noise",
    "slope_deg": "ramp angle in degrees (go2_slope)",
    "hole_undersize_m": "m by which the part's opening is narrower than the model's (ur5e_peg: a tighter fit)",
}


START_FROM = ("current", "pretrained")  # where a dynamics finetune starts: the version in force, or v0000


@dataclass(frozen=True)
class CommandConfig:
    """Commands given to the robot: Go2 forward speed (m/s), or the peg's hole-pose estimate noise."""

    eval_speeds: list[float] = field(default_factory=list)
    speed_range: list[float] = field(default_factory=lambda: [0.0, 0.0])
    lateral_range: list[float] = field(default_factory=lambda: [0.0, 0.0])
    yaw_rate_range: list[float] = field(default_factory=lambda: [0.0, 0.0])
    stand_probability: float = 0.0
    pose_noise_m: float = 0.0
    yaw_noise_rad: float = 0.0


@dataclass(frozen=True)
class TerrainConfig:
    """Go2 ground (the ramp angle is the dynamics parameter slope_deg); finish marker distance along the ramp."""

    finish_m: float = 0.0
    size_m: float = 20.0


@dataclass(frozen=True)
class PegConfig:
    """UR5e peg-in-hole geometry (metres) and the range of hole positions."""

    peg_half_side: float = 0.015
    peg_half_length: float = 0.04
    clearance: float = 0.001
    chamfer: float = 0.004  # width of the 45-degree chamfer around the opening
    hole_depth: float = 0.04
    success_depth: float = 0.025
    hole_center: list[float] = field(default_factory=lambda: [0.49, 0.13, 0.04])
    range_name: str = "narrow"
    ranges: dict[str, float] = field(default_factory=lambda: {"narrow": 0.02, "wide": 0.05})
    hole_yaw_range: float = 0.0
    start_height: float = 0.08
    start_xy_noise: float = 0.01
    action_scale_m: float = 0.01
    action_scale_rad: float = 0.05
    ik_damping: float = 0.05
    # N: on a robot, the press guard caps the tool target's push along the measured contact force at what should
    # bring the force to this (`simdist.robots.ur5e.actuation`), well under the arm's protective stop
    # (`termination.max_force_n`)
    press_limit_n: float = 150.0
    # true: an episode ends once the peg is in, as a time-out does (a real cell's script stops, retracts and resets
    # there); false: the arm holds the peg in the hole until the time limit
    end_on_success: bool = False


@dataclass(frozen=True)
class CameraConfig:
    """Optional RGB camera observation (offscreen, MUJOCO_GL=egl)."""

    enabled: bool = False
    name: str = "front"
    width: int = 64
    height: int = 64


@dataclass(frozen=True)
class TaskConfig:
    """One task: robot, rates, episode, observation noise, reward weights, randomisation and profiles."""

    task: str
    robot: str
    description: str
    physics_dt: float
    control_hz: float
    episode_seconds: float
    action_clip: float
    action_max_delta: float
    action_scale: float
    command: CommandConfig
    observation_noise: dict[str, float]
    reward: dict[str, float]
    nominal: dict[str, float]
    randomisation: dict[str, list[float]]
    profiles: dict[str, dict[str, float]]
    terrain: TerrainConfig = field(default_factory=TerrainConfig)
    peg: PegConfig = field(default_factory=PegConfig)
    camera: CameraConfig = field(default_factory=CameraConfig)
    termination: dict[str, float] = field(default_factory=dict)
    # the profile that stands in for the real robot (the calibrated one: `make run`, the launch files' default)
    real_profile: str = "sim"
    # where each dynamics finetune of this task starts unless told (`FinetuneOptions.start_from`): "current" (the
    # version in force: rounds continue) or "pretrained" (v0000: each round afresh on all the data so far), measured
    # per task (docs/results.md)
    finetune_start_from: str = "current"

    @property
    def substeps(self) -> int:
        return max(1, round(1.0 / (self.control_hz * self.physics_dt)))

    @property
    def episode_steps(self) -> int:
        return round(self.episode_seconds * self.control_hz)

    def profile(self, name: str) -> dict[str, float]:
        """Nominal dynamics with the named profile's values on top."""
        if name not in self.profiles:
            raise ConfigError(
                f"unknown profile '{name}' for task {self.task} (valid: {', '.join(sorted(self.profiles))})"
            )
        return {**self.nominal, **self.profiles[name]}


def _check_params(task: str, where: str, names: Any) -> None:
    for name in names:
        if name not in DYNAMICS_PARAMS:
            raise ConfigError(
                f"unknown dynamics parameter '{where}.{name}' in task {task} "
                f"(valid: {', '.join(f'{where}.{p}' for p in DYNAMICS_PARAMS)})"
            )


def task_files() -> dict[str, Path]:
    """Every task by name: config/tasks/ and the task folders registered robots bring (config/ wins a clash)."""
    from simdist import robots

    files = {
        p.stem: p for d in reversed([config_dir() / "tasks", *robots.task_dirs()]) for p in d.glob("*.yaml")
    }
    return dict(sorted(files.items()))


def task_config(task: str | TaskConfig, overrides: Mapping[str, Any] | None = None) -> TaskConfig:
    """`task` itself when it is a TaskConfig already (loaded once by the command, its overrides applied: the
    `overrides` given beside it are not applied again), else `load_task(task, overrides)`."""
    return task if isinstance(task, TaskConfig) else load_task(task, overrides)


def load_task(task: str, overrides: Mapping[str, Any] | None = None) -> TaskConfig:
    """Load config/tasks/<task>.yaml (or a registered robot's own task, `RobotDescription.tasks_dir`) with `--set`
    overrides into a validated TaskConfig."""
    files = task_files()
    if task not in files:
        raise ConfigError(f"unknown task '{task}' (valid: {', '.join(sorted(files))})")
    raw = read_yaml(files[task])
    data = apply_overrides(
        raw, dict(overrides or {}), open_keys=["profiles", "profiles.*", "nominal", "randomisation"]
    )
    cfg = build(TaskConfig, data)
    _check_params(task, "nominal", cfg.nominal)
    _check_params(task, "randomisation", cfg.randomisation)
    for name, values in cfg.profiles.items():
        _check_params(task, f"profiles.{name}", values)
    if cfg.real_profile not in cfg.profiles:
        raise ConfigError(
            f"real_profile '{cfg.real_profile}' of task {task} is not one of its profiles "
            f"(valid: {', '.join(sorted(cfg.profiles))})"
        )
    for name, bounds in cfg.randomisation.items():
        if len(bounds) != 2 or bounds[0] > bounds[1]:
            raise ConfigError(f"randomisation.{name} must be [low, high] with low <= high, got {bounds}")
    if cfg.finetune_start_from not in START_FROM:
        raise ConfigError(
            f"finetune_start_from of task {task} must be one of {', '.join(START_FROM)}, "
            f"got '{cfg.finetune_start_from}'"
        )
    if cfg.peg.range_name not in cfg.peg.ranges:
        raise ConfigError(
            f"peg.range_name '{cfg.peg.range_name}' unknown (valid: {', '.join(cfg.peg.ranges)})"
        )
    from simdist import robots

    robots.get(cfg.robot)  # unknown robot: one line naming the known ones
    return cfg


def as_dict(cfg: TaskConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
