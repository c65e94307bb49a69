"""MPPI planning through the world model, real-time on a CPU."""

from simdist.plan.config import (
    ActionLimits,
    PlannerConfig,
    load_planner_config,
    load_planner_configs,
    task_action_limits,
)
from simdist.plan.mppi import Plan, Planner, PlanStats
from simdist.plan.protocol import Context, PlanningModel

__all__ = [
    "ActionLimits",
    "Context",
    "Plan",
    "PlanStats",
    "Planner",
    "PlannerConfig",
    "PlanningModel",
    "load_planner_config",
    "load_planner_configs",
    "task_action_limits",
]
