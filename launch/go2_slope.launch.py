"""Go2 on the slippery slope: `ros2 launch simdist_bringup go2_slope.launch.py [robot:=sim|real] [profile:=...]`, the shared stack with
task go2_slope; every stack argument is declared here with this task's defaults and forwarded."""

from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare
from simdist_bringup.stack import task_arguments

from launch import LaunchDescription

TASK = "go2_slope"


def generate_launch_description():
    arguments = task_arguments(TASK)
    declared = [
        DeclareLaunchArgument(
            arg.name,
            default_value=arg.default,
            **({} if arg.choices is None else {"choices": list(arg.choices)}),
            description=arg.description,
        )
        for arg in arguments
    ]
    stack = PathJoinSubstitution([FindPackageShare("simdist_bringup"), "launch", "simdist_stack.launch.py"])
    include = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(stack),
        launch_arguments=[("task", TASK)] + [(arg.name, LaunchConfiguration(arg.name)) for arg in arguments],
    )
    return LaunchDescription([*declared, include])
