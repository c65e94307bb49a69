"""Go2 on soft foam: `ros2 launch simdist_bringup go2_foam.launch.py robot:=sim|real` (the shared stack with task go2_foam)."""

from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

from launch import LaunchDescription


def generate_launch_description():
    arguments = [
        DeclareLaunchArgument(
            "robot",
            default_value="sim",
            choices=["sim", "real"],
            description="sim: the MuJoCo robot under `profile`; real: the hardware",
        ),
        DeclareLaunchArgument(
            "profile",
            default_value="foam",
            description="dynamics profile of the simulated robot (default foam, the task's real-world emulation)",
        ),
        DeclareLaunchArgument(
            "model_dir",
            default_value="",
            description="world-model checkpoint folder (empty: models/go2_foam)",
        ),
        DeclareLaunchArgument(
            "bag_dir", default_value="runs/bags", description="folder where run_NN bags are written"
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
    ]
    stack = PathJoinSubstitution([FindPackageShare("simdist_bringup"), "launch", "simdist_stack.launch.py"])
    forwarded = ["robot", "profile", "model_dir", "bag_dir", "network_interface", "planner", "rt_priority"]
    include = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(stack),
        launch_arguments=[("task", "go2_foam")] + [(name, LaunchConfiguration(name)) for name in forwarded],
    )
    return LaunchDescription([*arguments, include])
