"""The robots: one module each, listed here, asked by every layer (`get(cfg.robot)`).

The two that ship are imported on first use. Another robot registers itself: its module calls `register(...)` with
its `RobotDescription` when imported; name the module in $SIMDIST_ROBOTS (comma-separated module paths) for the
command line and the ROS nodes to import it, or import it yourself before use.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from simdist.errors import ConfigError
from simdist.robots.description import STATE_PARTS, Evaluation, RobotDescription

# name -> the module that registers it
BUILTIN: dict[str, str] = {"go2": "simdist.robots.go2", "ur5e": "simdist.robots.ur5e"}
_registry: dict[str, RobotDescription] = {}
_plugins_loaded = False


def register(robot: RobotDescription) -> RobotDescription:
    """Make `robot` known by its name (again registering the same name replaces it). Returns it."""
    if not robot.name:
        raise ConfigError(f"{type(robot).__name__} has no name")
    _registry[robot.name] = robot
    return robot


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in filter(None, (m.strip() for m in os.environ.get("SIMDIST_ROBOTS", "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"SIMDIST_ROBOTS: cannot import robot module '{module}': {exc}") from None


def get(name: str) -> RobotDescription:
    """The robot called `name`; one clear ConfigError naming the known ones otherwise."""
    if name not in _registry and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    if name not in _registry:
        _load_plugins()
    if name not in _registry:
        raise ConfigError(f"unknown robot '{name}' (valid: {', '.join(names())})")
    return _registry[name]


def names() -> list[str]:
    """Every robot known now: the shipped ones and those registered."""
    _load_plugins()
    return sorted({*BUILTIN, *_registry})


def task_dirs() -> list[Path]:
    """Folders of task YAMLs that registered robots bring with them."""
    _load_plugins()
    return [r.tasks_dir for r in _registry.values() if r.tasks_dir is not None]


__all__ = ["STATE_PARTS", "Evaluation", "RobotDescription", "get", "names", "register", "task_dirs"]
