"""Does a DDS write stall the control loop while other processes join and leave the graph?

`python -m simdist_nodes.stall_probe [--seconds 90] [--transport nodes|udp|default] [--busy 2] [--out F.json]`

This process publishes as the planner does (the robot command at 50 Hz with the stack's QoS, and three per-tick
topics, transient local), timing every publish, and takes a robot state. Beside it, peer processes keep joining the
domain: each subscribes to those topics and publishes the state with the stack's QoS, computes on every core for
2-5 s (as a finetune does), and then either leaves or is SIGKILLed (a node that crashes, as the planner in the
watchdog tests); `--busy` processes load the cores meanwhile. Printed (and saved with `--out`): the publishes, their
p50 and maximum, how many took over two periods (40 ms) and over ten (200 ms), and for each of the latter its wall
and CPU time (CPU time near zero: the thread was blocked, not busy).

`--transport`: `nodes` (what the simdist nodes choose, `ros_common.prefer_udp_transport`), `udp` (UDPv4 only) or
`default` (Fast DDS's own default, shared memory beside UDP: no transports or profiles file from the environment).
The peers get the same choice. Mind ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST: under it rmw_fastrtps adds shared
memory whatever is chosen here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

PERIOD_S = 0.02
TICK_TOPICS = ("/probe/tick0", "/probe/tick1", "/probe/tick2")
COMMAND_TOPIC = "/probe/robot_command"
STATE_TOPIC = "/probe/robot_state"


def _choose_transport(choice: str) -> None:
    from simdist_nodes.ros_common import FASTDDS_CHOICES, prefer_udp_transport

    if choice == "udp":
        os.environ["FASTDDS_BUILTIN_TRANSPORTS"] = "UDPv4"
    elif choice == "default":
        for key in FASTDDS_CHOICES:
            os.environ.pop(key, None)
    else:
        prefer_udp_transport()


def _peer(domain: int, seed: int) -> None:
    """Join, subscribe and publish as the stack's nodes do, compute for 2-5 s, then leave or die without leaving."""
    import rclpy
    from std_msgs.msg import Float32MultiArray

    from simdist_nodes.ros_common import COMMAND, STATE, TICKS

    rng = random.Random(seed)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node(f"probe_peer_{os.getpid()}")
    state = node.create_publisher(Float32MultiArray, STATE_TOPIC, STATE)
    msg = Float32MultiArray()
    msg.data = [0.0] * 48
    node.create_subscription(Float32MultiArray, COMMAND_TOPIC, lambda _m: None, COMMAND)
    for topic in TICK_TOPICS:
        node.create_subscription(Float32MultiArray, topic, lambda _m: None, TICKS)

    def burn() -> None:  # BLAS threads on every core, as a finetune's training step: this peer starves itself
        import numpy as np

        a = np.random.default_rng(seed).standard_normal((256, 256))
        while True:
            a = np.tanh(a @ a)

    threading.Thread(target=burn, daemon=True).start()
    end = time.monotonic() + rng.uniform(2.0, 5.0)
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.01)
        state.publish(msg)
    if rng.random() < 0.5:
        os.kill(os.getpid(), 9)
    node.destroy_node()
    rclpy.shutdown()


def _churn(domain: int, transport: str, stop: threading.Event, joined: list[int]) -> None:
    while not stop.is_set():
        cmd = [sys.executable, "-m", "simdist_nodes.stall_probe", "--peer", str(len(joined))]
        cmd += ["--domain", str(domain), "--transport", transport]
        peer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while peer.poll() is None:
            if stop.wait(0.05):
                peer.kill()  # the probe is over: no peer outlives it
                peer.wait()
                return
        joined.append(peer.returncode)


def probe(seconds: float, domain: int, busy: int, transport: str) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Float32MultiArray

    from simdist_nodes.ros_common import COMMAND, STATE, TICKS

    stop = threading.Event()
    joined: list[int] = []  # each finished peer's exit status (-9: killed without leaving)
    churn = threading.Thread(target=_churn, args=(domain, transport, stop, joined), daemon=True)
    burners: list[subprocess.Popen] = []
    rclpy.init(domain_id=domain)
    try:
        burners += [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        node = rclpy.create_node("probe_planner")
        command = node.create_publisher(Float32MultiArray, COMMAND_TOPIC, COMMAND)
        ticks = [node.create_publisher(Float32MultiArray, topic, TICKS) for topic in TICK_TOPICS]
        node.create_subscription(Float32MultiArray, STATE_TOPIC, lambda _m: None, STATE)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        threading.Thread(target=executor.spin, daemon=True).start()
        small, large = Float32MultiArray(), Float32MultiArray()
        small.data, large.data = [0.0] * 12, [0.0] * 300
        churn.start()
        times: list[float] = []
        stalls: list[dict] = []
        end = time.monotonic() + seconds
        next_t = time.monotonic()
        while time.monotonic() < end:
            for publisher, msg in ((command, small), *((t, large) for t in ticks)):
                wall, cpu = time.perf_counter(), time.thread_time()
                publisher.publish(msg)
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                times.append(wall)
                if wall > 10 * PERIOD_S:
                    stalls.append({"wall_ms": round(wall * 1e3, 1), "cpu_ms": round(cpu * 1e3, 1)})
            next_t += PERIOD_S
            time.sleep(max(0.0, next_t - time.monotonic()))
        executor.shutdown(timeout_sec=2.0)
        node.destroy_node()
    finally:
        stop.set()
        if churn.is_alive():
            churn.join(timeout=5.0)
        for p in burners:
            p.kill()
        rclpy.shutdown()
    times.sort()
    return {
        "transport": os.environ.get("FASTDDS_BUILTIN_TRANSPORTS")
        or os.environ.get("FASTRTPS_DEFAULT_PROFILES_FILE", "default"),
        "seconds": seconds,
        "peers_joined": len(joined),
        "peers_killed": sum(rc == -9 for rc in joined),
        "publishes": len(times),
        "p50_us": round(times[len(times) // 2] * 1e6),
        "max_ms": round(times[-1] * 1e3, 1),
        "over_2_periods": sum(t > 2 * PERIOD_S for t in times),
        "over_10_periods": len(stalls),
        "stalls": stalls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simdist_nodes.stall_probe", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--transport", choices=("nodes", "udp", "default"), default="nodes")
    parser.add_argument("--busy", type=int, default=2, help="CPU-burning processes beside the probe")
    parser.add_argument("--domain", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "77")))
    parser.add_argument("--out", type=Path, help="save the figures as JSON")
    parser.add_argument("--peer", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.busy < 0:
        parser.error("--seconds must be > 0 and --busy >= 0")
    _choose_transport(args.transport)
    if args.peer is not None:
        _peer(args.domain, args.peer)
        return 0
    result = probe(args.seconds, args.domain, args.busy, args.transport)
    print(json.dumps(result, indent=1))
    if args.out:
        from simdist import atomic

        atomic.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
