"""`simdist emulate`: a task's robot simulated behind its own hardware protocol (the Go2 on its DDS topics), so that
`simdist deploy --robot <robot>:<address>` and the ROS proprio node run against it exactly as against the robot.

Each robot's emulator lives in its own module (`RobotDescription.emulator`). On Ctrl-C or SIGTERM the emulator
stops and prints one JSON line: what it received (commands, bad CRCs), its late steps, and the episodes it ran.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading

from simdist import robots
from simdist.cli import add_overrides_argument
from simdist.config import parse_overrides
from simdist.errors import RobotConnectionError
from simdist.sim.config import load_task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument("--profile", default="sim", help="the dynamics profile the emulated robot has")
    parser.add_argument(
        "--address",
        default="",
        help="where it listens, as deploy's --robot writes it after '<robot>:' (Go2: lo:1)",
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="stop after this long (default: until Ctrl-C)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND:START:DURATION",
        help="misbehave on schedule, seconds after the first command: state_gap, vanish; repeatable",
    )
    add_overrides_argument(parser)


def run(args: argparse.Namespace) -> int:
    cfg = load_task(args.task, parse_overrides(args.overrides))
    cfg.profile(args.profile)
    extra = {"faults": args.fault} if args.fault else {}
    emulator = robots.get(cfg.robot).emulator(cfg, args.profile, args.address, seed=args.seed, **extra)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            emulator.open()
        except Exception as exc:  # the DDS layer raises bare Exceptions: one line naming where it failed
            raise RobotConnectionError(
                f"emulate: cannot open {cfg.robot} at '{args.address}': {exc}"
            ) from None
        print(f"emulating a {cfg.robot} for {cfg.task} on sim:{args.profile}", flush=True)
        summary = emulator.serve(stop, args.seconds)
    finally:
        emulator.close()
    print(json.dumps(summary), flush=True)
    return 0
