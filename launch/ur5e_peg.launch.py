"""UR5e peg insertion: `ros2 launch simdist_bringup ur5e_peg.launch.py robot:=sim|real` (the shared stack with task ur5e_peg)."""

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
            default_value="real",
            description="dynamics profile of the simulated robot (default real, the task's real-world emulation)",
        ),
        DeclareLaunchArgument(
            "model_dir",
            default_value="",
            description="world-model checkpoint folder (empty: models/ur5e_peg)",
        ),
        DeclareLaunchArgument(
            "bag_dir", default_value="runs/bags", description="folder where run_NN bags are written"
        ),
        DeclareLaunchArgument(
            "robot_ip",
            default_value="192.168.1.102",
            description="UR5e controller address (robot:=real; RTDE on TCP 30004)",
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
    forwarded = ["robot", "profile", "model_dir", "bag_dir", "robot_ip", "planner", "rt_priority"]
    include = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(stack),
        launch_arguments=[("task", "ur5e_peg")] + [(name, LaunchConfiguration(name)) for name in forwarded],
    )
    return LaunchDescription([*arguments, include])
