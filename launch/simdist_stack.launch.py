"""The SimDist stack for one task: robot node (simulated or real), planner, logger, optional camera.

Included by the per-task files (ur5e_peg, go2_slope, go2_foam.launch.py), which only fix the task and defaults.
"""

import os

import yaml
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription

TASKS = ["ur5e_peg", "go2_slope", "go2_foam"]


def generate_launch_description():
    return LaunchDescription(
        [
            DeclareLaunchArgument("task", choices=TASKS, description="the task (config/tasks/<task>.yaml)"),
            DeclareLaunchArgument(
                "robot",
                default_value="sim",
                choices=["sim", "real"],
                description="sim: the MuJoCo robot under `profile`; real: the hardware through its adapter",
            ),
            DeclareLaunchArgument(
                "profile",
                default_value="sim",
                description="dynamics profile of the simulated robot (any profile of the task YAML, e.g. ptfe)",
            ),
            DeclareLaunchArgument(
                "model_dir",
                default_value="",
                description="world-model checkpoint folder (empty: $SIMDIST_MODELS_DIR/<task>, else models/<task>)",
            ),
            DeclareLaunchArgument(
                "bag_dir", default_value="runs/bags", description="folder where the logger writes run_NN bags"
            ),
            DeclareLaunchArgument(
                "robot_ip", default_value="192.168.1.102", description="UR5e controller address (robot:=real)"
            ),
            DeclareLaunchArgument(
                "network_interface",
                default_value="eth0",
                description="Ethernet interface wired to the Go2 (robot:=real; DDS domain 0)",
            ),
            DeclareLaunchArgument(
                "planner", default_value="cpu", choices=["cpu", "gpu"], description="planner preset"
            ),
            DeclareLaunchArgument(
                "rt_priority",
                default_value="0",
                description="SCHED_FIFO priority of the planner node's control thread (0: normal scheduling)",
            ),
            DeclareLaunchArgument(
                "camera",
                default_value="",
                description="camera source for robot:=real (OpenCV device index or URL; empty: no camera)",
            ),
            DeclareLaunchArgument(
                "log", default_value="true", choices=["true", "false"], description="record run_NN bags"
            ),
            OpaqueFunction(function=launch_setup),
        ]
    )


def launch_setup(context, *args, **kwargs):
    """Resolve the task's robot, the model folder and the config share, then build the nodes."""
    task = LaunchConfiguration("task").perform(context)
    robot = LaunchConfiguration("robot").perform(context)
    profile = LaunchConfiguration("profile").perform(context)
    config_dir = PathJoinSubstitution([FindPackageShare("simdist_bringup"), "config"]).perform(context)
    with open(os.path.join(config_dir, "tasks", f"{task}.yaml")) as stream:
        robot_kind = yaml.safe_load(stream)["robot"]  # "ur5e" or "go2"
    model_dir = LaunchConfiguration("model_dir").perform(context)
    if not model_dir:
        model_dir = os.path.join(os.environ.get("SIMDIST_MODELS_DIR", "models"), task)
    model_dir = os.path.abspath(model_dir)
    bag_dir = os.path.abspath(LaunchConfiguration("bag_dir").perform(context))
    camera = LaunchConfiguration("camera").perform(context)
    planner = LaunchConfiguration("planner").perform(context)

    if robot == "sim":
        robot_spec = f"sim:{profile}"
        robot_node = Node(
            package="simdist_nodes",
            executable="sim_robot_node",
            name="simdist_sim_robot",
            parameters=[{"task": task, "profile": profile}],
            output="screen",
        )
    else:
        if robot_kind == "ur5e":
            hardware = {"robot_ip": LaunchConfiguration("robot_ip").perform(context)}
            robot_spec = f"ur5e:{hardware['robot_ip']}"
        else:
            hardware = {"network_interface": LaunchConfiguration("network_interface").perform(context)}
            robot_spec = f"go2:{hardware['network_interface']}"
        robot_node = Node(
            package="simdist_nodes",
            executable="proprio_node",
            name="simdist_proprio",
            parameters=[{"task": task, **hardware}],
            output="screen",
        )
    use_camera = robot == "real" and camera != ""
    actions = [
        # The nodes read the task YAML from the installed share (the core is pip-installed, not a checkout).
        SetEnvironmentVariable("SIMDIST_CONFIG_DIR", config_dir),
        robot_node,
        Node(
            package="simdist_nodes",
            executable="planner_node",
            name="simdist_planner",
            parameters=[
                {
                    "task": task,
                    "model_dir": model_dir,
                    "planner": planner,
                    "camera": use_camera,
                    "rt_priority": int(LaunchConfiguration("rt_priority").perform(context)),
                }
            ],
            output="screen",
        ),
    ]
    if use_camera:
        actions.append(
            Node(
                package="simdist_nodes",
                executable="camera_node",
                name="simdist_camera",
                parameters=[{"source": camera}],
                output="screen",
            )
        )
    if LaunchConfiguration("log").perform(context) == "true":
        actions.append(
            Node(
                package="simdist_nodes",
                executable="logger_node",
                name="simdist_logger",
                parameters=[
                    {
                        "task": task,
                        "bag_dir": bag_dir,
                        "model_dir": model_dir,
                        "robot_spec": robot_spec,
                        "camera": use_camera,
                    }
                ],
                output="screen",
            )
        )
    return actions
