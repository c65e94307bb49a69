"""Experiment presets (config/experiment/<preset>.yaml) and the real-data budget in environment steps."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from simdist.config import apply_overrides, build, load_named
from simdist.errors import ConfigError
from simdist.runtime.finetune_options import FinetuneOptions

METHODS = ("zero_shot", "simdist", "full_finetune", "rl_finetune", "oracle")

EVAL_SEED = 10_000  # + seed: the same evaluation episodes for every method of a seed
HELDOUT_SEED = 20_000  # the held-out simulation rollouts of the prediction view
PROBE_SEED = 30_000  # the velocity probe's rollouts


@dataclass(frozen=True)
class OracleConfig:
    """Presets of the oracle's pretraining (the base model should come from the same ones)."""

    data_preset: str = "default"
    train_preset: str = "default"
    data_overrides: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RlConfig:
    """PPO finetuning: hyperparameters of an expert preset; network sizes always come from the expert."""

    expert_preset: str = "default"
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PredictionConfig:
    """The prediction view: held-out real-profile rollouts, the simulation data of the velocity probe."""

    heldout_envs: int = 8
    heldout_seconds: float = 16.0
    probe_envs: int = 8
    probe_seconds: float = 32.0
    probe_step: int = 10
    ridge: float = 1e-3
    slip_window_s: float = 2.0
    windows: int = 4096


@dataclass(frozen=True)
class ExperimentConfig:
    seeds: int
    points: list[float]
    methods: list[str]
    eval_episodes: int | None
    planner: str
    planner_overrides: dict[str, Any]
    finetune: dict[str, Any]
    oracle: OracleConfig
    rl: RlConfig
    prediction: PredictionConfig
    threads: int = 1
    first_seed: int = 0  # seeds first_seed .. first_seed + seeds - 1 (one seed per process)

    def finetune_options(self, *, trainable: str, seed: int) -> FinetuneOptions:
        """The same options for every world-model method; only what trains differs."""
        return build(FinetuneOptions, {**self.finetune, "trainable": trainable, "seed": seed}, "finetune")


def load_experiment_config(preset: str, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    cfg = build(ExperimentConfig, apply_overrides(load_named("experiment", preset), overrides or {}))
    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"unknown method '{unknown[0]}' (valid: {', '.join(METHODS)})")
    if cfg.seeds < 1:
        raise ConfigError(f"seeds must be at least 1, got {cfg.seeds}")
    if cfg.first_seed < 0:
        raise ConfigError(f"first_seed must be >= 0, got {cfg.first_seed}")
    check_points(cfg.points)
    cfg.finetune_options(trainable="dynamics", seed=0)  # a bad finetune key fails before any work
    return cfg


def check_points(points: list[float]) -> None:
    if (
        not points
        or any(p < 0 for p in points)
        or any(b <= a for a, b in zip(points[:-1], points[1:], strict=True))
    ):
        raise ConfigError(f"points must be ascending minutes >= 0, got {points}")


def parse_points(text: str) -> list[float]:
    """'0,5,10' -> [0.0, 5.0, 10.0] (minutes of real data)."""
    try:
        points = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--points: expected comma-separated minutes, got '{text}'") from None
    check_points(points)
    return points


def budget_steps(points: list[float], control_hz: float) -> list[int]:
    """Cumulative real environment steps at each point: minutes x 60 x control_hz."""
    return [round(p * 60.0 * control_hz) for p in points]


def increments(steps: list[int]) -> list[int]:
    """Steps to collect before each point (the first point starts from nothing)."""
    return [b - a for a, b in zip([0, *steps[:-1]], steps, strict=True)]


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def rl_geometry(step_increments: list[int], num_envs: int, steps_per_env: int) -> tuple[int, int]:
    """(environments, steps per environment) of a PPO iteration that divides every increment exactly.

    PPO collects num_envs x steps_per_env transitions per iteration; for the budget to be exact in steps, that
    product must divide each increment. Chosen as close as possible (log ratio) to the preset's geometry.
    """
    positive = [s for s in step_increments if s > 0]
    if not positive:
        return num_envs, steps_per_env
    g = math.gcd(*positive)
    best: tuple[float, int, int] | None = None
    for n in _divisors(g):
        if n > num_envs:
            break
        for s in _divisors(g // n):
            score = abs(math.log(n / num_envs)) + abs(math.log(s / steps_per_env))
            if best is None or score < best[0]:
                best = (score, n, s)
    assert best is not None
    return best[1], best[2]


def as_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
