"""`simdist bench <what>`: speed as a ratio to a baseline measured in the same run; `--json` prints one object."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

# what -> module with `bench(args) -> dict` and `summary(result) -> str`
TARGETS: dict[str, str] = {
    "sim": "simdist.sim.bench",
    "data": "simdist.data.bench",
    "planner": "simdist.plan.bench",
    "ros": "simdist_bringup.bench",  # the ROS packages (a checkout's src/ or a colcon install) and rclpy
    "faults": "simdist.hardware.faults",  # the deploy stack against a robot emulator, one fault at a time
    "fidelity": "simdist.hardware.fidelity",  # the Go2 over its DDS emulator against the in-process simulation
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from simdist.cli import add_task_arguments

    parser.add_argument("what", choices=sorted(TARGETS), help="what to measure")
    add_task_arguments(parser)
    parser.add_argument("--config", default=None, help="planner config (bench planner)")
    parser.add_argument("--num-envs", type=int, default=None, help="vector env size")
    parser.add_argument("--seconds", type=float, default=None, help="measurement time per variant")
    parser.add_argument("--ticks", type=int, default=None, help="measured control ticks (bench planner)")
    parser.add_argument("--model", default=None, metavar="DIR", help="world-model checkpoint (bench planner)")
    parser.add_argument(
        "--model-preset",
        default=None,
        metavar="NAME",
        help="without --model: random weights of config/model/NAME.yaml (default: default; bench planner)",
    )
    parser.add_argument(
        "--rt-priority",
        type=int,
        default=None,
        metavar="N",
        help="measure under SCHED_FIFO N (bench planner)",
    )
    parser.add_argument("--cpus", default=None, help="pin the measuring thread, e.g. 1 (bench planner)")
    parser.add_argument(
        "--unpaced",
        action="store_true",
        help="ticks back to back on a hot core instead of one per control period (bench planner)",
    )
    parser.add_argument("--breakdown", action="store_true", help="time per model part (bench planner)")
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="bench planner: also the config with these planner settings (or, with random weights, model.KEY=VALUE "
        "model sizes) changed (repeatable), the two measured in alternating blocks and compared as a ratio",
    )
    parser.add_argument(
        "--quality-episodes",
        type=int,
        default=None,
        metavar="N",
        help="closed-loop quality per config on the sim profile: N episodes per speed (Go2) or N (peg); needs --model",
    )
    parser.add_argument(
        "--quality-baseline",
        action="store_true",
        help="also measure the gpu config's closed-loop quality (slow on a CPU; the estimate is printed otherwise)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="N",
        help="bench fidelity: one run each way for each of the seeds 0..N-1 (default 1)",
    )
    parser.add_argument(
        "--faults",
        default=None,
        metavar="NAMES",
        help="comma-separated fault scenarios (bench faults; default all)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="where runs and the JSON go (bench faults: runs/faults; fidelity: runs/fidelity)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _ros_packages() -> None:
    """Make a checkout's ROS packages importable (a colcon install already is); one clear error without rclpy."""
    import sys
    from pathlib import Path

    from simdist.errors import ConfigError

    src = Path(__file__).resolve().parents[1]
    for name in ("simdist_nodes", "simdist_finetune", "simdist_bringup"):
        if (src / name / "setup.py").is_file() and str(src / name) not in sys.path:
            sys.path.insert(0, str(src / name))
    try:
        import rclpy  # noqa: F401

        import simdist_bringup  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"bench ros needs rclpy and the SimDist ROS packages ({exc}); `make setup` installs them"
        ) from None


def run(args: argparse.Namespace) -> int:
    if args.what == "ros":
        _ros_packages()
    module = importlib.import_module(TARGETS[args.what])
    result: dict[str, Any] = module.bench(args)
    print(json.dumps(result) if args.json else module.summary(result))
    return 0
