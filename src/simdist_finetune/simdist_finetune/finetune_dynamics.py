"""`ros2 run simdist_finetune finetune_dynamics --bag run_03`: finetune the dynamics on logged runs with the core,
then announce the new version on /simdist/model_version so the running planner hot-swaps it.

Works without ROS too (`finetune_dynamics --bag run_03`): the version is published through the checkpoint's
`dynamics/current` pointer, which the planner's model store also watches; only the announcement needs rclpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simdist.bags import schema
from simdist.bags.reader import read_topics
from simdist.bags.writer import RUN_PREFIX
from simdist.errors import BagError, CheckpointError, SimdistError
from simdist.model.checkpoint import version_label
from simdist.runtime.finetune import finetune
from simdist.runtime.finetune_options import add_option_arguments, options_from_args
from simdist.runtime.realtime import yield_to_control

DEFAULT_BAG_DIR = "runs/bags"
# The finetuning options this command takes (their defaults and help are FinetuneOptions's, as for `simdist finetune`)
OPTIONS = ("max_minutes", "max_steps", "min_improvement", "threads", "seed")


def strip_ros_args(argv: Sequence[str]) -> list[str]:
    """The arguments without ROS's (`--ros-args ... [--]`, as `ros2 run` and launch append them).

    Uses rclpy's own parser when rclpy is installed, else the same rule: from each `--ros-args` up to the next
    `--` (dropped too) or the end.
    """
    try:
        from rclpy.utilities import remove_ros_args
    except ImportError:
        out: list[str] = []
        inside = False
        for arg in argv:
            if arg == "--ros-args":
                inside = True
            elif inside and arg == "--":
                inside = False
            elif not inside:
                out.append(arg)
        return out
    return list(remove_ros_args(args=list(argv)))


def resolve_bag(bag: str, bag_dir: str | Path) -> Path:
    """A bag path as given, else the run of that name (or number: `3`, `run_03`) under `bag_dir`.

    Raises:
        BagError: nothing of that name exists (the message lists the runs that do).
    """
    given = Path(bag).expanduser()
    if given.is_dir():
        return given
    root = Path(bag_dir).expanduser()
    names = [bag]
    if bag.isdigit():
        names.append(f"{RUN_PREFIX}{int(bag):02d}")
    for name in names:
        if (root / name).is_dir():
            return root / name
    runs = sorted(p.name for p in root.glob(f"{RUN_PREFIX}*") if p.is_dir()) if root.is_dir() else []
    found = ", ".join(runs) if runs else "none"
    raise BagError(f"no bag '{bag}' (not a folder, and not a run under {root}; runs there: {found})")


def model_of(bag: Path) -> Path:
    """The model folder a run was deployed with (its run_start event's "model")."""
    for _, msg in read_topics(bag, [schema.EVENTS])[schema.EVENTS]:
        event = json.loads(msg.data)
        if event.get("event") == schema.RUN_START and event.get("model"):
            return Path(event["model"])
    raise CheckpointError(f"{bag}: the run does not name its model; pass --model-dir")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="finetune_dynamics",
        description="Finetune the world model's dynamics on logged runs and hot-swap the result into the planner.",
    )
    parser.add_argument(
        "--bag", dest="bags", action="append", required=True, help="run_NN, NN, or a bag path"
    )
    parser.add_argument(
        "--bag-dir",
        default=os.environ.get("SIMDIST_BAG_DIR", DEFAULT_BAG_DIR),
        help=f"where run_NN bags are ($SIMDIST_BAG_DIR, default {DEFAULT_BAG_DIR})",
    )
    parser.add_argument(
        "--model-dir",
        default=os.environ.get("SIMDIST_MODEL_DIR"),
        help="checkpoint folder ($SIMDIST_MODEL_DIR, default: the model the first run was deployed with)",
    )
    add_option_arguments(parser, OPTIONS)
    parser.add_argument(
        "--wait",
        type=float,
        default=10.0,
        help="seconds to wait for the planner to confirm the swap (ROS only)",
    )
    return parser


CLOCK_MARGIN_NS = 500_000_000


class Announcer:
    """The ROS side of a finetune: joins the graph before training starts, so the planner's model_version event
    is seen however the planner learns of the new version (this announcement, or its own `dynamics/current`
    watcher, which may swap first), then announces the version and waits for that event."""

    def __init__(self) -> None:
        import importlib

        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        from simdist_finetune.conversions import TOPIC, TYPE, transient_local_qos

        def m(name: str) -> Any:
            package, _, type_name = name.split("/")
            return getattr(importlib.import_module(f"{package}.msg"), type_name)

        self._m = m
        self._rclpy = rclpy
        # swaps from now on count (the planner's own watcher may swap before the announcement); the margin is for
        # a planner on another computer whose clock runs a little behind this one's
        self.since_ns = time.time_ns() - CLOCK_MARGIN_NS
        rclpy.init()
        self.node = rclpy.create_node("finetune_dynamics")
        self.events: list[Any] = []
        self._lock = threading.Lock()
        self.publisher = self.node.create_publisher(m(TYPE), TOPIC, transient_local_qos())
        # the planner's events topic is transient local (its tick topics' QoS), so a late join still sees them
        events_qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=1000,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.node.create_subscription(m(schema.EVENT_TYPE), schema.EVENTS, self._on_event, events_qos)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, name="finetune-ros", daemon=True)
        self._thread.start()

    def _on_event(self, msg: Any) -> None:
        with self._lock:
            self.events.append(msg)

    def confirmed(self, label: str) -> bool:
        from simdist_finetune.conversions import confirms

        with self._lock:
            return any(confirms(msg, label, self.since_ns) for msg in self.events)

    def announce(self, model_dir: Path, version: int, wait_s: float) -> str:
        """Publish the version on /simdist/model_version and wait for the planner's event naming it."""
        from simdist_finetune.conversions import version_msg

        label = version_label(version)
        self.publisher.publish(version_msg(self._m, str(model_dir), version))
        deadline = time.monotonic() + wait_s
        while not self.confirmed(label) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.confirmed(label):
            return f"the planner now plans with {label}"
        return (
            f"no planner confirmed {label} within {wait_s:g} s (a planner picks it up from dynamics/current)"
        )

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self._thread.join(
            timeout=2.0
        )  # a spinning thread left at exit aborts the process in rclpy's C++ side
        self.node.destroy_node()
        self._rclpy.try_shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(strip_ros_args(sys.argv[1:] if argv is None else argv))
    try:
        bags = [resolve_bag(b, args.bag_dir) for b in args.bags]
        model_dir = Path(args.model_dir) if args.model_dir else model_of(bags[0])
        options = options_from_args(args, OPTIONS)
    except SimdistError as exc:
        sys.stderr.write(f"finetune_dynamics: error: {exc}\n")
        return exc.exit_code
    try:
        announcer: Announcer | None = Announcer()
    except ImportError:
        announcer = None
    try:
        print(f"finetuning {model_dir} on {', '.join(str(b) for b in bags)}", flush=True)
        yield_to_control()  # beside a running planner, as the in-process finetune worker does
        try:
            report = finetune(model_dir, bags, options, log=lambda line: print(line, flush=True))
        except SimdistError as exc:
            sys.stderr.write(f"finetune_dynamics: error: {exc}\n")
            return exc.exit_code
        if report.version is None:
            print(f"nothing published: {report.reason}")
            return 0
        print(
            f"published {version_label(report.version)}: {report.reason}; report {report.report_json}",
            flush=True,
        )
        if announcer is None:
            print("rclpy not available: not announced (a running planner picks it up from dynamics/current)")
        else:
            print(announcer.announce(model_dir, report.version, args.wait), flush=True)
        return 0
    finally:
        if announcer is not None:
            announcer.close()


if __name__ == "__main__":
    raise SystemExit(main())
