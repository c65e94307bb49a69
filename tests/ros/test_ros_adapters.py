"""The nodes' adapters end to end without rclpy: simulated robot -> state topics -> TopicRobot -> the core's
DeployLoop -> /simdist/robot_command -> the robot; and the loop's ticks and events -> TickLogger -> a run bag that
the core's reader and finetuning accept. A bus delivers each topic in order but interleaves topics at random,
as DDS may."""

from __future__ import annotations

import random
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

from simdist.bags import read_episodes, read_topics, schema
from simdist.hardware.sim_robot import SimRobot
from simdist.model.checkpoint import load_checkpoint, publish_dynamics
from simdist.plan.config import load_planner_config, task_action_limits
from simdist.runtime.actuation import SimActuator
from simdist.runtime.loop import DeployLoop
from simdist.runtime.proprio import proprio_from_state
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
        measured.append(proprio_from_state(cfg.robot, state))
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
    for topic in conversions.STATE_TOPICS[cfg.robot]:
        bus.subscribe(topic, lambda msg, topic=topic: remote.on_state(topic, msg))
    bus.subscribe(conversions.TASK_COMMAND, remote.on_task_command)
    bus.subscribe(conversions.ROBOT_EVENTS, remote.on_robot_event)

    logger = TickLogger(
        tmp_path / "bags", robot=cfg.robot, joint_names=robot.joint_names, info={"model": str(folder)}
    )
    for topic in conversions.STATE_TOPICS[cfg.robot]:
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
        limits=task_action_limits({"action_clip": cfg.action_clip, "robot": cfg.robot}),
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
    assert logger.written == ticks and logger.dropped == 0  # the last tick is written at close
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


def test_bridge_watchdog_holds_once_when_commands_stop() -> None:
    messages = StrictMessages("humble")
    clock = [0.0]

    class Actuator:
        holds = 0

        def apply(self, action: Any, state: Any, now: float) -> Any:
            from simdist.runtime.actuation import Actuation

            return Actuation()

        def hold(self) -> None:
            Actuator.holds += 1

    class Robot:
        def read(self) -> None:
            return None

    bridge = RobotBridge(
        messages,
        lambda t, m: None,
        robot=Robot(),
        robot_kind="go2",
        actuator=Actuator(),
        command=lambda: np.zeros(3, np.float32),
        watchdog_s=0.1,
        clock=lambda: clock[0],
    )
    assert not bridge.check_watchdog()  # nothing to guard before the first command
    bridge.on_command(messages.roundtrip(conversions.vector_msg(messages, np.ones(12), "action")))
    clock[0] = 0.05
    assert not bridge.check_watchdog()
    clock[0] = 0.2
    assert bridge.check_watchdog() and Actuator.holds == 1
    clock[0] = 0.5
    assert not bridge.check_watchdog() and Actuator.holds == 1  # held once, not every period
