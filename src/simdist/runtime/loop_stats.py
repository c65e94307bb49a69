"""What a deploy run counted: ticks, fresh / late / held / missed actions, errors, swaps, episodes."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class LoopStats:
    """What happened in a run. Every tick is exactly one of fresh, late or held."""

    ticks: int = 0
    fresh: int = 0  # executed the action planned for this very tick (planning ahead: by the tick before)
    late: int = 0  # the plan missed its deadline: executed the next step of the last plan
    held: int = 0  # sent the safe hold (no usable plan, stale state, an error, or the safety filter)
    missed: int = 0  # control periods skipped because the loop itself overran (real time only)
    stale: int = 0
    errors: int = 0
    swaps: int = 0
    adapted_plans: int = 0  # plans computed with the search granted to adapted dynamics (the adapted planner)
    safe_stops: int = 0  # holds that lasted `safe_stop_after_s` and became a safe stop (the run then ended)
    # real time: ticks whose own work took longer than a period (logged with their phases, see _slow_tick)
    slow_ticks: int = 0
    episodes: list[dict[str, Any]] = field(default_factory=list)  # robot-reported episode ends (metrics)
    # per tick, as packed doubles (8 bytes a tick, not a Python float's 32: a node runs for hours at 50 Hz)
    plan_seconds: array[float] = field(default_factory=lambda: array("d"))
    # from reading the robot to the command sent (the state-to-command latency the robot sees), per tick
    act_seconds: array[float] = field(default_factory=lambda: array("d"))
    versions: list[str] = field(default_factory=list)  # the model version of every tick
    # ticks the last layer before the robot shaped or replaced, per reason (the safety filter's flags: rate_limited,
    # torque_limited, position_clipped, stale_state, ...; the UR5e's press_limited)
    interventions: dict[str, int] = field(default_factory=dict)

    def intervened(self, flags: frozenset[str]) -> None:
        for flag in flags:
            self.interventions[flag] = self.interventions.get(flag, 0) + 1

    def summary(self) -> dict[str, Any]:
        times = np.asarray(self.plan_seconds) if self.plan_seconds else np.zeros(1)
        acting = np.asarray(self.act_seconds) if self.act_seconds else np.zeros(1)
        return {
            "ticks": self.ticks,
            "fresh": self.fresh,
            "late": self.late,
            "held": self.held,
            "missed": self.missed,
            "stale": self.stale,
            "errors": self.errors,
            "swaps": self.swaps,
            "adapted_plans": self.adapted_plans,
            "safe_stops": self.safe_stops,
            "slow_ticks": self.slow_ticks,
            "episodes": len(self.episodes),
            "plan_ms_p50": float(np.percentile(times, 50) * 1e3),
            "plan_ms_p99": float(np.percentile(times, 99) * 1e3),
            "act_ms_p50": float(np.percentile(acting, 50) * 1e3),
            "act_ms_p99": float(np.percentile(acting, 99) * 1e3),
            "interventions": dict(sorted(self.interventions.items())),
        }
