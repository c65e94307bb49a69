"""What a SimDist stack launch starts, without `launch`: the nodes of one task with their executables and
parameters, and the arguments a launch file declares. `launch/simdist_stack.launch.py` turns these into
launch_ros `Node` actions; the process-level tests start the same nodes from the same specs, so they follow the
launch file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from simdist.sim.config import load_task, task_files

TASKS = tuple(task_files())  # every task of config/tasks (and of registered robots)


@dataclass(frozen=True)
class Argument:
    name: str
    default: str | None
    description: str
    choices: tuple[str, ...] | None = None


# Every argument of the stack, in declaration order; the per-task launch files declare and forward all but `task`.
ARGUMENTS: tuple[Argument, ...] = (
    Argument("task", None, "the task (config/tasks/<task>.yaml)", TASKS),
    Argument(
        "robot",
        "sim",
        "sim: the MuJoCo robot under `profile`; real: the hardware through its adapter",
        ("sim", "real"),
    ),
    Argument("profile", "sim", "dynamics profile of the simulated robot (any profile of the task YAML)"),
    Argument("model_dir", "", "world-model folder (empty: $SIMDIST_MODELS_DIR/<task>, else models/<task>)"),
    Argument("bag_dir", "runs/bags", "folder where the logger writes run_NN bags"),
    Argument("robot_ip", "192.168.1.102", "UR5e controller address (robot:=real; RTDE on TCP 30004)"),
    Argument("network_interface", "eth0", "Ethernet interface wired to the Go2 (robot:=real)"),
    Argument(
        "go2_domain_id",
        "0",
        "the Go2's CycloneDDS domain (robot:=real; 0 on a stock robot, 1 for unitree_mujoco)",
    ),
    Argument("planner", "cpu", "planner preset (config/planner/<name>.yaml)", ("cpu", "gpu", "ensemble")),
    Argument(
        "rt_priority", "0", "SCHED_FIFO priority of the planner's control thread (0: normal scheduling)"
    ),
    Argument("camera", "", "camera source for robot:=real (OpenCV device index or URL; empty: none)"),
    Argument("log", "true", "record run_NN bags", ("true", "false")),
)


def task_arguments(task: str) -> tuple[Argument, ...]:
    """The arguments a per-task launch file declares: all but `task`, with the task's real profile as default."""
    out = []
    for arg in ARGUMENTS:
        if arg.name == "task":
            continue
        if arg.name == "profile":
            arg = Argument(
                "profile",
                load_task(task).real_profile,
                f"{arg.description}; default: the task's real-world one",
            )
        out.append(arg)
    return tuple(out)


@dataclass(frozen=True)
class NodeSpec:
    """One node of the stack: `ros2 run <package> <executable>` with these parameters under this name."""

    package: str
    executable: str
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    required: bool = False  # the stack shuts down when this node exits


def _launch_value(name: str, value: str, default: Any) -> Any:
    """A launch argument's string as the type of the parameter it sets (the parameter's default's)."""
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"launch argument {name}:={value} is not an integer") from None
    return value


def stack_nodes(values: dict[str, str], *, robot_kind: str | None = None) -> list[NodeSpec]:
    """The nodes for resolved launch arguments (strings, as launch gives them; missing ones take defaults).

    Raises:
        ValueError: an unknown task or a bad argument value (the message names it).
    """
    given = {a.name: a.default for a in ARGUMENTS} | dict(values)
    for arg in ARGUMENTS:
        value = given.get(arg.name)
        if value is None:
            raise ValueError(f"launch argument '{arg.name}' is required")
        if arg.choices and value not in arg.choices:
            raise ValueError(f"launch argument {arg.name}:={value} (valid: {', '.join(arg.choices)})")
    task = given["task"]
    if robot_kind is None:
        robot_kind = load_task(task).robot
    kind = robot_kind
    model_dir = given["model_dir"] or os.path.join(os.environ.get("SIMDIST_MODELS_DIR", "models"), task)
    model_dir = os.path.abspath(model_dir)
    try:
        rt_priority = int(given["rt_priority"])
    except ValueError:
        raise ValueError(f"launch argument rt_priority:={given['rt_priority']} is not an integer") from None

    if given["robot"] == "sim":
        robot_spec = f"sim:{given['profile']}"
        robot = NodeSpec(
            "simdist_nodes",
            "sim_robot_node",
            "simdist_sim_robot",
            {"task": task, "profile": given["profile"]},
            required=True,
        )
    else:
        from simdist import robots

        description = robots.get(kind)
        hardware = {
            p.name: _launch_value(p.launch_arg, given[p.launch_arg], p.default)
            for p in description.hardware_parameters
        }
        robot_spec = f"{kind}:{description.hardware_address(hardware)}"
        robot = NodeSpec("simdist_nodes", "proprio_node", "simdist_proprio", {"task": task, **hardware}, True)
    use_camera = given["robot"] == "real" and given["camera"] != ""
    nodes = [
        robot,
        NodeSpec(
            "simdist_nodes",
            "planner_node",
            "simdist_planner",
            {
                "task": task,
                "model_dir": model_dir,
                "planner": given["planner"],
                "camera": use_camera,
                "rt_priority": rt_priority,
            },
            required=True,
        ),
    ]
    if use_camera:
        nodes.append(NodeSpec("simdist_nodes", "camera_node", "simdist_camera", {"source": given["camera"]}))
    if given["log"] == "true":
        nodes.append(
            NodeSpec(
                "simdist_nodes",
                "logger_node",
                "simdist_logger",
                {
                    "task": task,
                    "bag_dir": os.path.abspath(given["bag_dir"]),
                    "model_dir": model_dir,
                    "robot_spec": robot_spec,
                    "camera": use_camera,
                },
            )
        )
    return nodes
