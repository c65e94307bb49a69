"""Stand-ins for the `launch` and `launch_ros` modules (not installable here): each class records what it was
given, so a launch file can be executed and its description inspected without ROS."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Recorded:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs


class LaunchConfiguration(Recorded):
    def perform(self, context: Any) -> str:
        return context.values[self.args[0]]


class PathJoinSubstitution(Recorded):
    def perform(self, context: Any) -> str:
        parts = [p.perform(context) if hasattr(p, "perform") else str(p) for p in self.args[0]]
        return str(Path(*parts))


class FindPackageShare(Recorded):
    def perform(self, context: Any) -> str:
        return str(context.share)


class Context:
    """What `perform` needs: the resolved launch arguments and the folder standing for the package's share."""

    def __init__(self, values: dict[str, str], share: Path) -> None:
        self.values = values
        self.share = share


_MODULES = {
    "launch": ["LaunchDescription"],
    "launch.actions": [
        "DeclareLaunchArgument",
        "EmitEvent",
        "IncludeLaunchDescription",
        "OpaqueFunction",
        "RegisterEventHandler",
        "SetEnvironmentVariable",
    ],
    "launch.event_handlers": ["OnProcessExit"],
    "launch.events": ["Shutdown"],
    "launch.launch_description_sources": ["PythonLaunchDescriptionSource"],
    "launch.substitutions": [],
    "launch_ros": [],
    "launch_ros.actions": ["Node"],
    "launch_ros.substitutions": [],
}


@contextmanager
def fake_launch() -> Iterator[None]:
    saved = {name: sys.modules.get(name) for name in _MODULES}
    for name, classes in _MODULES.items():
        module = types.ModuleType(name)
        for cls in classes:
            setattr(module, cls, type(cls, (Recorded,), {}))
        sys.modules[name] = module
    sys.modules["launch.substitutions"].LaunchConfiguration = LaunchConfiguration  # type: ignore[attr-defined]
    sys.modules["launch.substitutions"].PathJoinSubstitution = PathJoinSubstitution  # type: ignore[attr-defined]
    sys.modules["launch_ros.substitutions"].FindPackageShare = FindPackageShare  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
