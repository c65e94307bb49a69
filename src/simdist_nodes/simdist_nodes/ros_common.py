"""rclpy helpers the SimDist nodes share: parameters with descriptions, QoS profiles, and a clean spin."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import Executor, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from simdist.errors import SimdistError

# Reliable, as the bag's recorded QoS (rclcpp's default): the logger must get every tick.
RELIABLE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
# The logger buffers more: a slow disk write must not drop ticks.
RELIABLE_DEEP = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=200,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
# Sensing only needs the newest sample (compatible with reliable publishers).
LATEST = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)


def declare(node: Node, name: str, default: Any, description: str) -> Any:
    """Declare a parameter with its description and return its value."""
    return node.declare_parameter(name, default, ParameterDescriptor(description=description)).value


def now_ns(node: Node) -> int:
    return int(node.get_clock().now().nanoseconds)


def run_node(make: Callable[[], Node], *, threads: int = 2, on_shutdown: str | None = None) -> int:
    """rclpy.init, build the node, spin it on a MultiThreadedExecutor until Ctrl-C, then call its `on_shutdown`."""
    rclpy.init()
    try:
        node = make()
    except SimdistError as exc:  # bad parameters, task or model: one line, exit 2, as the core's CLI does
        print(f"{getattr(make, '__name__', 'node')}: error: {exc}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    executor: Executor = MultiThreadedExecutor(num_threads=threads)
    executor.add_node(node)
    try:
        executor.spin()
    except KeyboardInterrupt:
        pass
    finally:
        if on_shutdown is not None:
            getattr(node, on_shutdown)()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
