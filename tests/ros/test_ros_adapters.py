"""The nodes' adapters end to end without rclpy: simulated robot -> state topics -> TopicRobot -> the core's
DeployLoop -> /simdist/robot_command -> the robot; and the loop's ticks and events -> TickLogger -> a run bag that
the core's reader and finetuning accept. A bus delivers each topic in order but interleaves topics at random,
as DDS may."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import StrictMessages
from fast_planner import FAST_PLANNER
from simdist_nodes.bag_logger import TickLogger
from simdist_nodes.planner_io import RemoteActuator, TickPublisher, TopicRobot, joint_names_for
from simdist_nodes.robot_bridge import RobotBridge

from simdist import robots
from simdist.bags import read_episodes, read_topics, schema
from simdist.errors import BagError
from simdist.hardware.sim_robot import SimRobot
from simdist.model.checkpoint import load_checkpoint, publish_dynamics
from simdist.plan.config import load_planner_config, task_action_limits
from simdist.runtime.actuation import SimActuator
from simdist.runtime.loop import DeployLoop
from simdist.runtime.store import ModelStore
from simdist.sim.config import load_task
from simdist_nodes import conversions


class Bus:
    """Per-topic FIFO queues; `deliver` empties them in a random interleaving (per-topic order kept)."""

    def __init__(self, messages: StrictMessages, seed: int) -> None:
        self.messages = messages
        self.queues: dict[str, list[Any]] = defaultdict(list)
        self.subscribers: dict[str, list[Any]] = defaultdict(list)
        self.rng = random.Random(seed)
        self.published: dict[str, int] = defaultdict(int)

    def publish(self, topic: str, msg: Any) -> None:
        assert msg.msgtype == conversions.topic_type(topic), topic
        self.published[topic] += 1
        self.queues[topic].append(self.messages.roundtrip(msg))  # what a subscriber gets: the wire format

    def subscribe(self, topic: str, callback: Any) -> None:
        self.subscribers[topic].append(callback)

    def deliver(self) -> None:
        while any(self.queues.values()):
            topic = self.rng.choice([t for t, q in self.queues.items() if q])
            msg = self.queues[topic].pop(0)
            for callback in self.subscribers[topic]:
                callback(msg)


@pytest.mark.parametrize("task", ["go2_slope", "ur5e_peg"])
def test_sim_robot_planner_and_logger_over_topics(task: str, model_for, tmp_path: Path) -> None:
    messages = StrictMessages("jazzy")
    bus = Bus(messages, seed=1)
    cfg = load_task(task, {"episode_seconds": 0.6})
    folder = model_for(task)

    robot = SimRobot(task, "sim", seed=0, overrides={"episode_seconds": 0.6})
    measured: list[np.ndarray] = []  # the robot's proprio of every published state (noise is drawn per read)
    read = robot.read

    def recording_read() -> Any:
        state = read()
        measured.append(robots.get(cfg.robot).proprio(state))
        return state

    robot.read = recording_read  # type: ignore[method-assign]
    bridge = RobotBridge(
        messages,
        bus.publish,
        robot=robot,
        robot_kind=cfg.robot,
        actuator=SimActuator(robot),
        command=robot.command,
    )
    bus.subscribe(conversions.ROBOT_COMMAND, bridge.on_command)

    remote = TopicRobot(cfg.robot, joint_names_for(cfg.robot), cfg.control_hz)
    for topic in conversions.state_topics(cfg.robot):
        bus.subscribe(topic, lambda msg, topic=topic: remote.on_state(topic, msg))
    bus.subscribe(conversions.TASK_COMMAND, remote.on_task_command)
    bus.subscribe(conversions.ROBOT_EVENTS, remote.on_robot_event)

    logger = TickLogger(
        tmp_path / "bags", robot=cfg.robot, joint_names=robot.joint_names, info={"model": str(folder)}
    )
    for topic in conversions.state_topics(cfg.robot):
        bus.subscribe(topic, lambda msg, topic=topic: logger.on_state(topic, msg))
    for topic in (schema.OBSERVATION, schema.ACTION, schema.COMMAND):
        bus.subscribe(topic, lambda msg, topic=topic: logger.on_vector(topic, msg))
    bus.subscribe(schema.EVENTS, logger.on_event)

    store = ModelStore(folder)
    loop = DeployLoop(
        robot=remote,
        robot_kind=cfg.robot,
        actuator=RemoteActuator(messages, bus.publish),
        store=store,
        planner_config=load_planner_config(
            "cpu", cfg.robot, {**FAST_PLANNER, "horizon": store.model.horizon}
        ),
        limits=task_action_limits(cfg),
        command=lambda: remote.command(),
        control_hz=cfg.control_hz,
        bag=TickPublisher(messages, bus.publish),  # type: ignore[arg-type]
    )
    loop.open(warmup=2)
    ticks = 2 * cfg.episode_steps + 3
    seen: list[np.ndarray] = []
    for k in range(ticks):
        bridge.publish_state(stamp_ns=1_000_000 * (k + 1))
        bus.deliver()
        if k == cfg.episode_steps + 2:  # a finetune publishes a version mid-episode; the store validates it
            publish_dynamics(folder, load_checkpoint(folder), note="test")
            assert store.check() is not None
        loop.tick(k)
        seen.append(loop.history.arrays()[3])
        bus.deliver()  # the command reaches the robot (one physics step in lockstep) and the logger gets the tick
    loop.close()
    bag = logger.close()

    stats = loop.stats
    assert stats.ticks == ticks and stats.errors == 0 and stats.fresh == ticks and stats.swaps == 1
    # every episode end of the robot came back over /simdist/robot_events (a random model may fall early)
    assert bridge.commands == ticks and len(stats.episodes) >= 2
    assert [e["episode"] for e in stats.episodes] == list(range(len(stats.episodes)))
    assert bag is not None and bag.name == "run_01"
    assert logger.written == ticks and logger.lost == 0 and logger.events_lost == 0
    episodes = read_episodes(bag)
    assert len(episodes) == len(stats.episodes) + 1  # the open one is closed with the bag
    assert sum(len(e["proprio"]) for e in episodes) == ticks
    logged = np.concatenate([e["proprio"] for e in episodes])
    np.testing.assert_array_equal(logged, np.stack(seen))  # exactly what the model saw
    # ... which is what the robot measured (the bridge reads once per state and once per command)
    np.testing.assert_allclose(np.stack(seen), np.stack(measured[0::2]), rtol=1e-5, atol=1e-5)
    events = [m.data for _, m in read_topics(bag, [schema.EVENTS])[schema.EVENTS]]
    assert sum('"model_version": "v0001"' in e and '"event": "model_version"' in e for e in events) == 1
    assert bus.published[conversions.ROBOT_COMMAND] == ticks + 1  # and the safe hold that close() sends
    hold = bus.queues[conversions.ROBOT_COMMAND][-1]
    assert conversions.vector_from_msg(hold).size == 0
    bus.deliver()
    assert bridge.holds == 1


def _go2_bridge(
    messages: StrictMessages,
    robot: Any,
    actuator: Any,
    clock: list[float],
    published: Any = None,
    **watchdog: float,
) -> RobotBridge:
    """A Go2 robot bridge on a fake robot and actuator, its clock `clock[0]`; `published` gets (topic, message)."""
    return RobotBridge(
        messages,
        lambda topic, msg: published((topic, msg)) if published is not None else None,
        robot=robot,
        robot_kind="go2",
        actuator=actuator,
        command=lambda: np.zeros(3, np.float32),
        stop_s=1.0,
        clock=lambda: clock[0],
        **watchdog,
    )


@pytest.mark.parametrize("dampable", [True, False], ids=["go2_damps", "ur5e_holds"])
def test_bridge_watchdog_holds_then_stops_safely_when_commands_stop(dampable: bool) -> None:
    messages = StrictMessages("humble")
    clock = [0.0]
    calls: list[str] = []
    published: list[tuple[str, Any]] = []

    class Actuator:
        def apply(self, action: Any, state: Any, now: float) -> Any:
            from simdist.runtime.actuation import Actuation

            calls.append("apply")
            return Actuation()

        def hold(self) -> None:
            calls.append("hold")

    class Robot:
        def read(self) -> None:
            return None

    class DampingRobot(Robot):
        def damp(self) -> None:
            calls.append("damp")

    bridge = _go2_bridge(
        messages, DampingRobot() if dampable else Robot(), Actuator(), clock, published.append, watchdog_s=0.1
    )
    action = messages.roundtrip(conversions.vector_msg(messages, np.ones(12), "action"))
    assert bridge.check_watchdog() is None  # nothing to guard before the first command
    bridge.on_command(action)
    clock[0] = 0.05
    assert bridge.check_watchdog() is None
    clock[0] = 0.2
    assert bridge.check_watchdog() == "hold" and calls == ["apply", "hold"]
    clock[0] = 0.5
    assert bridge.check_watchdog() is None and calls == ["apply", "hold"]  # held once, not every period
    bridge.on_command(action)  # commands come back: the hold ends
    assert bridge.stage is None and calls[-1] == "apply"
    clock[0] = 0.65
    assert bridge.check_watchdog() == "hold"
    clock[0] = 1.4  # 0.9 s after the last command: still holding
    assert bridge.check_watchdog() is None
    clock[0] = 1.6
    assert bridge.check_watchdog() == "safe_stop"
    assert calls[-1] == ("damp" if dampable else "hold")
    events = [conversions.event_from_msg(m) for t, m in published if t == conversions.ROBOT_EVENTS]
    assert [(e["event"], e["stage"]) for e in events] == [
        ("watchdog", "hold"),
        ("watchdog", "resume"),
        ("watchdog", "hold"),
        ("watchdog", "safe_stop"),
    ]
    assert events[1]["age_s"] == pytest.approx(0.5)  # the outage the resume ended
    assert events[-1]["age_s"] == pytest.approx(1.1)
    before = len(calls)
    bridge.on_command(action)  # the safe stop is final for this node
    assert len(calls) == before and bridge.refused == 1
    clock[0] = 5.0
    assert bridge.check_watchdog() is None


def test_bridge_serialises_commands_the_watchdog_and_the_final_hold() -> None:
    """A command being sent when the watchdog's period comes (another thread) finishes before the watchdog decides,
    so the robot is never stopped under a command that then runs; after the node's final hold nothing is sent."""
    messages = StrictMessages("jazzy")
    clock = [0.0]
    calls: list[str] = []
    entered, release = threading.Event(), threading.Event()

    class Actuator:
        def apply(self, action: Any, state: Any, now: float) -> Any:
            from simdist.runtime.actuation import Actuation

            calls.append("apply")
            if len(calls) > 1:  # the second command: the driver takes its time
                entered.set()
                assert release.wait(5.0)
            calls.append("applied")
            return Actuation()

        def hold(self) -> None:
            calls.append("hold")

    class Robot:
        def read(self) -> None:
            return None

        def damp(self) -> None:
            calls.append("damp")

    bridge = _go2_bridge(messages, Robot(), Actuator(), clock, watchdog_s=0.1)
    action = messages.roundtrip(conversions.vector_msg(messages, np.ones(12), "action"))
    bridge.on_command(action)  # arms the watchdog at t = 0
    sender = threading.Thread(target=bridge.on_command, args=(action,))
    sender.start()
    assert entered.wait(5.0)
    clock[0] = 2.0  # the state thread's period comes while the command is being sent
    stages: list[str | None] = []
    watcher = threading.Thread(target=lambda: stages.append(bridge.check_watchdog()))
    watcher.start()
    watcher.join(0.3)
    assert watcher.is_alive()  # it waits for the command to finish ...
    release.set()
    sender.join(5.0)
    watcher.join(5.0)
    assert not sender.is_alive() and not watcher.is_alive()
    # ... and stops the robot after it, not under it
    assert calls == ["apply", "applied", "apply", "applied", "damp"] and stages == ["safe_stop"]
    stopped: list[str] = []
    bridge.shutdown(lambda: stopped.append("stop"))
    assert calls[-1] == "damp" and stopped == ["stop"]  # no hold re-stiffens a damped robot

    fresh = _go2_bridge(messages, Robot(), Actuator(), clock)
    calls.clear()
    fresh.on_command(action)
    fresh.shutdown(lambda: stopped.append("stop"))
    assert calls == ["apply", "applied", "hold"] and stopped == ["stop", "stop"]
    fresh.on_command(action)  # a late command after the final hold: dropped
    clock[0] = 100.0
    assert fresh.check_watchdog() is None
    assert calls == ["apply", "applied", "hold"] and fresh.commands == 1


@pytest.mark.parametrize("late_join", [False, True], ids=["lost_in_flight", "logger_joins_late"])
def test_logger_marks_lost_ticks_as_gaps_and_keeps_the_ticks_times(tmp_path: Path, late_join: bool) -> None:
    """Ticks published by a TickPublisher, one action lost on the wire (or the first ticks missed by a logger that
    joined late): the bag has every other tick at its own time, and the reader splits the episode at the hole."""
    messages = StrictMessages("jazzy")
    bus = Bus(messages, seed=3)
    robot = SimRobot("go2_slope", "sim", seed=0)
    publisher = TickPublisher(messages, bus.publish)
    logger = TickLogger(tmp_path / "bags", robot="go2", joint_names=joint_names_for("go2"))
    state = robot.read()
    t0 = 1_800_000_000_000_000_000
    period = 20_000_000
    for topic, msg in conversions.state_messages(messages, "go2", state, t0):
        logger.on_state(topic, messages.roundtrip(msg))
    publisher.start_episode(model_version="v0000", stamp_ns=t0)
    dropped_tick = 4 if late_join else 10
    for k in range(30):
        vectors = {"observation": np.full(3, k, np.float32), "action": np.full(2, -k, np.float32)}
        publisher.append(**vectors, command=np.zeros(1, np.float32), state=state, stamp_ns=t0 + k * period)
        if late_join and k < dropped_tick:  # published before the logger subscribed, beyond the kept history
            bus.queues.clear()
        elif k == dropped_tick and not late_join:
            bus.queues[schema.ACTION].pop()  # the action of this tick never arrives
        if not late_join or k >= dropped_tick:
            for topic, handler in (
                (schema.OBSERVATION, logger.on_vector),
                (schema.ACTION, logger.on_vector),
                (schema.COMMAND, logger.on_vector),
            ):
                bus.subscribers[topic] = [lambda msg, topic=topic, handler=handler: handler(topic, msg)]
            bus.subscribers[schema.EVENTS] = [logger.on_event]
        bus.deliver()
    publisher.end_episode(success=True, stamp_ns=t0 + 30 * period)
    bus.deliver()
    bag = logger.close()
    late = {"observation": np.zeros(3, np.float32), "action": np.zeros(2, np.float32)}
    publisher.append(**late, command=np.zeros(1, np.float32), state=state, stamp_ns=t0 + 31 * period)
    bus.deliver()  # a tick from a planner still running after the logger closed: dropped, no second bag
    assert logger.after_close == 3 and sorted(p.name for p in (tmp_path / "bags").iterdir()) == [bag.name]
    assert logger.close() is None
    lost = dropped_tick if late_join else 1
    assert logger.written == 30 - lost and logger.lost == lost
    kept = [k for k in range(30) if (k >= dropped_tick if late_join else k != dropped_tick)]
    if late_join:  # the episode start was lost with the first ticks: the reader refuses rather than guess
        assert logger.events_lost == 1
        with pytest.raises(BagError, match="no episode_start"):
            read_episodes(bag)
        observations = read_topics(bag, [schema.OBSERVATION])[schema.OBSERVATION]
        stamps = np.array([t for t, _ in observations])
        # the ticks' own times (an event written at a tick's time moves the tick by 1 ns: bag times are unique)
        np.testing.assert_allclose(stamps - t0, np.array(kept) * period, atol=10)
        return
    episodes = read_episodes(bag)
    steps = np.concatenate([e["step"] for e in episodes])
    np.testing.assert_array_equal(steps, kept)  # steps count the lost tick: no window spans the hole
    assert [int(e["segment"][0]) for e in episodes] == [0, 1]
    np.testing.assert_array_equal(np.concatenate([e["proprio"][:, 0] for e in episodes]), kept)
    stamps = np.concatenate([e["timestamp_ns"] for e in episodes])
    np.testing.assert_allclose(
        stamps - t0, np.array(kept) * period, atol=10
    )  # the ticks' times, not write times


def test_paced_thread_keeps_the_rate_and_skips_overrun_periods() -> None:
    """Real time: 100 Hz for 0.6 s, one call overrunning three periods: the periods it overran are counted as
    missed and not made up in a burst."""
    import time

    from simdist_nodes.ros_common import PacedThread

    calls: list[int] = []

    def step(k: int, target: float) -> None:
        calls.append(k)
        if len(calls) == 10:
            time.sleep(0.035)  # overruns 3.5 periods

    paced = PacedThread(0.01, step, "test-paced").start()
    time.sleep(0.6)
    paced.stop()
    assert 35 <= len(calls) <= 62 and paced.missed >= 2
    gaps = np.diff(calls)
    assert gaps.min() >= 1 and (gaps > 1).sum() >= 1  # k follows the clock
    assert len(calls) + paced.missed <= 62
    # the overrun is the step's own: attributed to a slow step, not to a thread that did not run on time
    assert paced.missed_after_slow >= 2 and paced.longest_step_s >= 0.035
    assert paced.missed_after_slow + paced.missed_while_waiting == paced.missed
    assert f"{paced.missed} periods missed" in paced.summary()


def test_a_stalled_step_dumps_every_threads_stack(capfd: pytest.CaptureFixture[str]) -> None:
    """A step running past `stall_dump_periods` writes each thread's stack to stderr (where it stalled: the step's own
    frame), once per stall; a step that returns in time writes nothing."""
    import time

    from simdist_nodes.ros_common import PacedThread

    calls: list[int] = []

    def stalling_step(k: int, target: float) -> None:
        calls.append(k)
        if len(calls) == 3:
            time.sleep(0.25)

    paced = PacedThread(0.02, stalling_step, "test-stall", stall_dump_periods=5).start()
    time.sleep(0.6)
    paced.stop()
    err = capfd.readouterr().err
    assert len(calls) >= 5 and err.count("Timeout (0:00:00.100000)!") == 1
    assert "in stalling_step" in err and err.split("Timeout")[0].strip() == ""  # nothing before the stall


@pytest.mark.parametrize(
    ("env", "chosen"),
    [
        ({}, "UDPv4"),
        ({"FASTDDS_BUILTIN_TRANSPORTS": "SHM"}, "SHM"),
        ({"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/fastdds.xml"}, None),
    ],
)
def test_nodes_use_udp_unless_the_user_chose_fast_dds_transports(
    env: dict[str, str], chosen: str | None
) -> None:
    from simdist_nodes.ros_common import prefer_udp_transport

    did = prefer_udp_transport(env)
    assert did is (chosen == "UDPv4") and env.get("FASTDDS_BUILTIN_TRANSPORTS") == chosen


@pytest.mark.parametrize(
    ("env", "forced"),
    [
        ({}, False),
        ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}, True),
        ({"ROS_LOCALHOST_ONLY": "1"}, True),
        ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}, False),
    ],
)
def test_shared_memory_is_forced_only_by_fast_dds_on_localhost(env: dict[str, str], forced: bool) -> None:
    from simdist_nodes.ros_common import shared_memory_forced

    assert shared_memory_forced(env) is forced
