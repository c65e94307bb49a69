"""rclpy helpers the SimDist nodes share: parameters with descriptions, the QoS of each kind of topic, and one way
to run a node (signals, bad parameters, logging, a shutdown that publishes the final safe command first)."""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import logging.handlers
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterException
from rclpy.executors import Executor, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from simdist.errors import SimdistError


def _qos(depth: int, *, reliable: bool = True, latched: bool = False) -> QoSProfile:
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


# Robot state and commands: reliable, and only the newest matters to the controller.
STATE = _qos(10)
COMMAND = _qos(1)
# The planner's per-tick vectors and events: reliable, and kept (transient local, 20 s at 50 Hz) so a logger
# that joins after the first ticks (DDS discovery takes 1-3 s) still records the run from its first tick.
TICKS = _qos(1000, latched=True)
# The logger's side of TICKS: a deeper reader queue, so the replay of that history (up to 4000 messages at once)
# is not overwritten before a busy logger takes it.
TICKS_RECORDED = _qos(5000, latched=True)
# Events between nodes (the robot's episode ends and watchdog stages): reliable, none dropped.
EVENTS = _qos(100)
# The logger's view of the state: a few seconds of it, to find the state current at each tick's time.
STATE_HISTORY = _qos(50)
# Camera frames: the newest only, and a lost frame is not worth a resend.
FRAMES = _qos(1, reliable=False)


def declare(node: Node, name: str, default: Any, description: str, *, dynamic: bool = False) -> Any:
    """Declare a parameter with its description and return its value (`dynamic`: any type is accepted)."""
    descriptor = ParameterDescriptor(description=description, dynamic_typing=dynamic)
    return node.declare_parameter(name, default, descriptor).value


def now_ns(node: Node) -> int:
    return int(node.get_clock().now().nanoseconds)


class RosLogHandler(logging.Handler):
    """Python logging (the core's `simdist.*` loggers) into the node's logger, hence /rosout."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self._logger = node.get_logger()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"[{record.name}] {self.format(record)}"
            if record.levelno >= logging.ERROR:
                self._logger.error(text)
            elif record.levelno >= logging.WARNING:
                self._logger.warning(text)
            elif record.levelno >= logging.INFO:
                self._logger.info(text)
            else:
                self._logger.debug(text)
        except Exception:  # logging must never take a node down
            self.handleError(record)


_BRIDGED = ("simdist", "simdist_nodes", "simdist_finetune")


class _LogBridge:
    """The core's loggers into the node's logger through a queue: a record costs the logging thread (the control
    thread, say) a queue put; a listener thread makes the rclpy call, which inspects the caller's frame and
    publishes on /rosout (milliseconds here, enough to make a 50 Hz tick that logs miss its period)."""

    def __init__(self, node: Node) -> None:
        ros = RosLogHandler(node)
        ros.setFormatter(logging.Formatter("%(message)s"))
        self.handler = logging.handlers.QueueHandler(queue.SimpleQueue())
        self._listener = logging.handlers.QueueListener(self.handler.queue, ros)
        self._listener.start()
        for name in _BRIDGED:
            logger = logging.getLogger(name)
            logger.addHandler(self.handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False

    def close(self) -> None:
        """Stop taking records, then hand every queued one to the node's logger."""
        for name in _BRIDGED:
            logging.getLogger(name).removeHandler(self.handler)
        self._listener.stop()


# A control step running this many periods dumps every thread's stack to the node's log; off unless this variable is
# set (a diagnosis, not a default: arming faulthandler's timer starts and joins a thread on every step, 49 us p50
# here when idle but 3.9 ms p50 and 7.9 ms p99 with both cores busy, inside a 20 ms period).
STALL_DUMP_PERIODS = float(os.environ.get("SIMDIST_STALL_DUMP_PERIODS", "0")) or None


def _name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the kernel too (Linux, 15 characters), so `top -H`, `ps -L` and a debugger
    show which thread is the control loop. Best effort: elsewhere nothing happens."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


class PacedThread:
    """Calls `step(k, target)` once per period on its own thread, on the clock: a late call skips the periods it
    overran (`missed` counts them) instead of bursting to catch up. Kept out of the rclpy executor, whose Python
    wait-set rebuilding per timer event cost more CPU than the control work itself on this 2-core machine.

    Each skip is attributed: `missed_after_slow` periods followed a step that itself took longer than a period (the
    work was slow), `missed_while_waiting` followed a short step (the thread did not run on time: the CPU or the
    GIL was elsewhere). `longest_step_s` is the longest step.

    A step still running after `stall_dump_periods` periods dumps every thread's Python stack to stderr (the node's
    log), from faulthandler's own C thread, which needs no GIL: a stall shows where each thread was, even one that
    holds the GIL in C. None: no dumps (the default unless SIMDIST_STALL_DUMP_PERIODS is set). faulthandler has one
    such timer per process: one dumping thread a process."""

    def __init__(
        self,
        period: float,
        step: Callable[[int, float], None],
        name: str,
        *,
        stall_dump_periods: float | None = STALL_DUMP_PERIODS,
    ) -> None:
        self.period = period
        self.stall_dump_s = None if stall_dump_periods is None else stall_dump_periods * period
        self._step = step
        self._stop = threading.Event()
        self.missed = 0
        self.missed_after_slow = 0
        self.missed_while_waiting = 0
        self.longest_step_s = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> PacedThread:
        self._thread.start()
        return self

    def _run(self) -> None:
        _name_os_thread(self._thread.name)
        t0 = time.monotonic()
        k = 0
        last_step = 0.0
        while not self._stop.is_set():
            target = t0 + k * self.period
            delay = target - time.monotonic()
            if delay > 0:
                if self._stop.wait(delay):
                    break
            elif -delay >= self.period:  # whole periods passed: they are missed, not made up in a burst
                skipped = int(-delay // self.period)
                self.missed += skipped
                if last_step > self.period:
                    self.missed_after_slow += skipped
                else:
                    self.missed_while_waiting += skipped
                k += skipped
                target = t0 + k * self.period
            began = time.monotonic()
            if self.stall_dump_s is not None:
                faulthandler.dump_traceback_later(self.stall_dump_s)
            try:
                self._step(k, target)
            finally:
                if self.stall_dump_s is not None:
                    faulthandler.cancel_dump_traceback_later()
            last_step = time.monotonic() - began
            self.longest_step_s = max(self.longest_step_s, last_step)
            k += 1

    def summary(self) -> str:
        return (
            f"paced: {self.missed} periods missed ({self.missed_after_slow} after a step longer than a period, "
            f"{self.missed_while_waiting} with the thread not running on time); "
            f"longest step {self.longest_step_s * 1e3:.1f} ms"
        )

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)


def parameter_error(name: str, exc: BaseException) -> str:
    """One line for a node that could not start: the node and, for a bad parameter, the parameter."""
    if isinstance(exc, ParameterException):
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"{name}: error: bad parameter: {text}"
    return f"{name}: error: {exc}"


# Fast DDS's environment: transports chosen by the user, or a profiles file that may choose them.
FASTDDS_CHOICES = (
    "FASTDDS_BUILTIN_TRANSPORTS",
    "FASTRTPS_DEFAULT_PROFILES_FILE",
    "FASTDDS_DEFAULT_PROFILES_FILE",
)


def prefer_udp_transport(env: MutableMapping[str, str] = os.environ) -> bool:
    """Make this process's Fast DDS participant use UDP only, unless the user chose Fast DDS transports or a
    profiles file. Returns whether it did.

    Fast DDS's shared-memory transport, on by default beside UDP, blocked the planner's command publish for ~330 ms
    (rcl_publish holds the GIL: the whole node stops) while another process joined the graph or died: its writer
    waits on the other process's port (a lock in shared memory, or opening the port), and a peer that is starved of
    CPU or was SIGKILLed holds it up (native stacks and counts in docs/results.md, "A hot swap across processes").
    The stack's messages are small (vectors, 64 x 64 frames): shared memory buys nothing worth that stall.

    Under ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (or ROS_LOCALHOST_ONLY=1) rmw_fastrtps adds shared memory whatever
    this says (`shared_memory_forced`); config/dds/fastdds_loopback_udp.xml keeps one computer's graph on loopback
    without it."""
    if any(key in env for key in FASTDDS_CHOICES):
        return False
    env["FASTDDS_BUILTIN_TRANSPORTS"] = "UDPv4"
    return True


def shared_memory_forced(env: Mapping[str, str] = os.environ) -> bool:
    """Whether rmw_fastrtps adds its shared-memory transport whatever FASTDDS_BUILTIN_TRANSPORTS or a profiles file
    say: the discovery range is localhost only (seen with rmw_fastrtps 8.4, Jazzy)."""
    fast_dds = env.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp").startswith("rmw_fastrtps")
    localhost = (
        env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").upper() == "LOCALHOST"
        or env.get("ROS_LOCALHOST_ONLY") == "1"
    )
    return fast_dds and localhost


def run_node(
    make: Callable[[], Node],
    *,
    name: str,
    threads: int = 2,
    on_shutdown: str | None = None,
    args: list[str] | None = None,
) -> int:
    """Run one node as its own process: SIGINT and SIGTERM stop it cleanly (exit 0), a second signal during the
    stop is ignored, and the node's `on_shutdown` runs while the executor still spins, so what it publishes (the
    final hold) goes out before the context closes. A bad parameter, task or model: one line, exit 2.

    rclpy's own signal handler is off: it would shut the context down before `on_shutdown` could publish.
    """
    prefer_udp_transport()  # before the participant exists
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        if stop.is_set():
            print(f"{name}: {signal.Signals(signum).name} again while stopping; ignored", file=sys.stderr)
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            node = make()
        except (SimdistError, ParameterException, ValueError, SystemExit) as exc:
            if isinstance(exc, SystemExit) and not isinstance(exc.code, str):
                raise
            print(parameter_error(name, exc), file=sys.stderr)
            return getattr(exc, "exit_code", 2)  # an unreachable robot: 1, as in `simdist deploy`
        if shared_memory_forced():
            node.get_logger().warning(
                "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST: Fast DDS adds shared memory, whose writes can stall this "
                "node ~330 ms while another process joins or dies; for one computer use SUBNET with "
                "FASTRTPS_DEFAULT_PROFILES_FILE=config/dds/fastdds_loopback_udp.xml"
            )
        bridge = _LogBridge(node)
        executor: Executor = (
            SingleThreadedExecutor() if threads == 1 else MultiThreadedExecutor(num_threads=threads)
        )
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, name=f"{name}-executor", daemon=True)
        spinner.start()
        stopped_by = getattr(node, "stopped", None)  # a node may end itself (an Event it sets)
        while not stop.wait(0.1):
            if stopped_by is not None and stopped_by.is_set():
                break
            if not spinner.is_alive():
                break
        try:
            if on_shutdown is not None:
                getattr(node, on_shutdown)()
            flush_publishers(node)
        finally:
            # rclpy's teardown has been seen to hang on a loaded machine; the node's work is done by now, so
            # bound it: past 8 s the process leaves at once with the status the stop deserves.
            deadline = threading.Timer(8.0, _leave, args=(name,))
            deadline.daemon = True
            deadline.start()
            executor.shutdown(timeout_sec=2.0)
            spinner.join(timeout=3.0)
            bridge.close()
            if (
                spinner.is_alive()
            ):  # destroying the node under a stuck executor can block; exit with it aborts
                _leave(name)
            node.destroy_node()
        return 0  # the deadline stays armed through rclpy's shutdown and interpreter exit (a daemon thread)
    finally:
        rclpy.try_shutdown()
        for sig, old in previous.items():
            signal.signal(sig, old)


def _leave(name: str) -> None:
    print(f"{name}: rclpy did not shut down in time; exiting", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(0)


def flush_publishers(node: Node, timeout_s: float = 1.0) -> None:
    """Wait (bounded) until every reliable subscriber acknowledged what this node published."""
    from rclpy.duration import Duration

    for publisher in list(node.publishers):
        try:
            publisher.wait_for_all_acked(Duration(seconds=timeout_s))
        except Exception:  # a publisher without reliable readers has nothing to wait for
            pass
