"""The SimDist stack for one task: robot node (simulated or real), planner, logger, camera where there is one.

Included by the per-task files (ur5e_peg, go2_slope, go2_foam.launch.py), which fix the task and its defaults.
The nodes and their parameters come from `simdist_bringup.stack` (the process-level tests start the same ones).
When the planner or the robot node exits, the whole stack shuts down: a robot without its planner is held and
then stopped by its own watchdog, and nothing is left running half a stack.
"""

import os

import yaml
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
)
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare
from simdist_bringup.stack import ARGUMENTS, stack_nodes

from launch import LaunchDescription


def generate_launch_description():
    declared = [
        DeclareLaunchArgument(
            arg.name,
            **({} if arg.default is None else {"default_value": arg.default}),
            **({} if arg.choices is None else {"choices": list(arg.choices)}),
            description=arg.description,
        )
        for arg in ARGUMENTS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=launch_setup)])


def launch_setup(context, *args, **kwargs):
    """Resolve the arguments and the task's robot from the installed config, then build the nodes."""
    values = {arg.name: LaunchConfiguration(arg.name).perform(context) for arg in ARGUMENTS}
    config_dir = PathJoinSubstitution([FindPackageShare("simdist_bringup"), "config"]).perform(context)
    with open(os.path.join(config_dir, "tasks", f"{values['task']}.yaml")) as stream:
        robot_kind = yaml.safe_load(stream)["robot"]  # "ur5e" or "go2"
    # The nodes read the task YAML from the installed share (the core is pip-installed, not a checkout).
    actions = [SetEnvironmentVariable("SIMDIST_CONFIG_DIR", config_dir)]
    for spec in stack_nodes(values, robot_kind=robot_kind):
        node = Node(
            package=spec.package,
            executable=spec.executable,
            name=spec.name,
            parameters=[spec.parameters],
            output="screen",
            sigterm_timeout="5",
        )
        actions.append(node)
        if spec.required:
            actions.append(
                RegisterEventHandler(
                    OnProcessExit(
                        target_action=node,
                        on_exit=[EmitEvent(event=Shutdown(reason=f"{spec.name} exited"))],
                    )
                )
            )
    return actions
