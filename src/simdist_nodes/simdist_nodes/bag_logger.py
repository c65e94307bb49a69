"""The logger node's core, without rclpy: joins the planner's per-tick vectors and events with the robot's state and
writes them as a run_NN bag through `simdist.bags.BagWriter` (same schema as `simdist deploy`).

DDS orders messages per topic only, and a reliable topic delivers one writer's messages in order. The planner
(`planner_io.TickPublisher`) labels each vector with its tick, the tick's time and the count of events before it,
and numbers its events, so here:
- a tick is written once its three vectors are in and every event published before it has been written;
- a tick is provably lost when, on a topic still missing its vector, a later tick's vector has arrived (in-order
  delivery), or when it is more than `max_pending` ticks behind the newest; an event likewise when a later event
  arrived. Lost ticks are counted and marked in the bag with a `ticks_gap` event (reason "lost") at their place,
  so the reader never joins the ticks on either side;
- each tick is stamped with its own time (the planner's), not the time it was written;
- the state written with a tick is the robot's latest whose header stamp is not after the tick's time.
The robot node's watchdog events are written as they come.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simdist.bags import schema
from simdist.bags.writer import BagWriter, next_run_dir
from simdist.hardware.state import RobotState
from simdist_nodes import conversions

log = logging.getLogger(__name__)

_VECTORS = {schema.OBSERVATION: "observation", schema.ACTION: "action", schema.COMMAND: "command"}
_STATE_HISTORY = 256  # state messages kept per topic (5 s at 50 Hz) to find the one current at a tick


@dataclass
class _Tick:
    stamp_ns: int = 0
    events: int = 0  # events published before this tick
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    image: np.ndarray | None = None


def _header_ns(msg: Any) -> int | None:
    header = getattr(msg, "header", None)
    if header is None:
        return None
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


class TickLogger:
    """Args:
    bag_dir: the folder whose next run_NN gets this run (created on the first write, so an idle stack writes none).
    robot: the task's robot (`simdist.robots` name); joint_names: written when the state carries none.
    camera: also log /simdist/camera/image_raw. storage, distro: as for BagWriter. info: run_start fields.
    max_pending: a tick still incomplete this many ticks behind the newest is declared lost.
    """

    def __init__(
        self,
        bag_dir: str | Path,
        *,
        robot: str,
        joint_names: tuple[str, ...] = (),
        camera: bool = False,
        storage: str = "mcap",
        distro: str = "jazzy",
        info: dict[str, Any] | None = None,
        max_pending: int = 500,
    ) -> None:
        self.bag_dir = Path(bag_dir)
        self.robot = robot
        self.joint_names = joint_names
        self.camera = camera
        self.storage = storage
        self.distro = distro
        self.info = dict(info or {})
        self.max_pending = max_pending
        self.bag: BagWriter | None = None
        self.written = 0  # ticks in the bag
        self.lost = 0  # ticks the planner published that never arrived complete (marked in the bag)
        self.events_lost = 0
        self._lock = threading.Lock()  # one lock: every callback ends in the one bag
        self._states: dict[str, deque[tuple[int, Any]]] = {
            t: deque(maxlen=_STATE_HISTORY) for t in conversions.state_topics(robot)
        }
        self._last_stamp = 0  # the newest header stamp seen (for topics without a header)
        self._image: np.ndarray | None = None
        self._ticks: dict[int, _Tick] = {}
        self._newest: dict[str, int] = {}  # per vector topic, the highest tick received
        self._events: dict[int, dict[str, Any]] = {}  # by seq, not yet written
        self._newest_event = -1
        self._next = 0  # the next tick to write or declare lost
        self._next_event = 0  # the next event seq to write or declare lost
        self._gap = 0  # lost ticks not yet marked in the bag
        self._robot_events: list[dict[str, Any]] = []
        self.received = 0  # messages from the planner so far
        self.closed = False  # set by `close`: later messages are counted, never written
        self.after_close = 0
        self._events_missing: set[int] = set()

    # -- callbacks -----------------------------------------------------------------------------------------------
    def on_state(self, topic: str, msg: Any, now: float = 0.0) -> None:
        with self._lock:
            if self._refused():
                return
            stamp = _header_ns(msg)
            if stamp is None:
                stamp = self._last_stamp
            else:
                self._last_stamp = max(self._last_stamp, stamp)
            self._states[topic].append((stamp, msg))

    def on_image(self, msg: Any) -> None:
        image = conversions.image_from_msg(msg)
        with self._lock:
            self._image = image

    def on_event(self, msg: Any) -> None:
        event = conversions.event_from_msg(msg)
        if "tick" not in event or "seq" not in event:
            log.warning("logger: event without tick and seq ignored: %s", event)
            return
        with self._lock:
            if self._refused():
                return
            self.received += 1
            seq = int(event["seq"])
            if seq >= self._next_event:
                self._events[seq] = event
                self._newest_event = max(self._newest_event, seq)
                self._flush(final=False)

    def on_robot_event(self, msg: Any) -> None:
        """The robot node's watchdog events (its episode ends come through the planner's events instead)."""
        event = conversions.event_from_msg(msg)
        if event.get("event") != schema.WATCHDOG:
            return
        with self._lock:
            if self._refused():
                return
            self._robot_events.append(event)

    def on_vector(self, topic: str, msg: Any) -> None:
        label = conversions.tick_of(msg)
        if label is None:
            log.warning("logger: %s without a tick label ignored", topic)
            return
        with self._lock:
            if self._refused():
                return
            self.received += 1
            self._newest[topic] = max(self._newest.get(topic, -1), label.tick)
            if label.tick >= self._next:
                entry = self._ticks.get(label.tick)
                if entry is None:
                    entry = self._ticks[label.tick] = _Tick(label.stamp_ns, label.events, image=self._image)
                entry.vectors[_VECTORS[topic]] = conversions.vector_from_msg(msg)
            self._flush(final=False)

    def close(self) -> Path | None:
        """Write every pending tick and event (incomplete ticks count as lost), close the bag; returns its path
        (None when nothing was logged). Whatever arrives after it (other nodes still running while this one stops)
        is counted in `after_close` and dropped: a bag opened then would never be closed."""
        with self._lock:
            if self.closed:
                return None
            self.closed = True
            self._flush(final=True)
            bag, self.bag = self.bag, None
        if bag is not None:
            bag.close()
            return bag.path
        return None

    # -- internals -----------------------------------------------------------------------------------------------
    def _refused(self) -> bool:
        """True (and counted) for a message that came after `close`. Called under the lock."""
        if self.closed:
            self.after_close += 1
        return self.closed

    def _state_at(self, stamp_ns: int) -> RobotState | None:
        chosen: dict[str, Any] = {}
        for topic, history in self._states.items():
            if not history:
                return None
            before = [msg for t, msg in history if t <= stamp_ns]
            chosen[topic] = before[-1] if before else history[0][1]
        return conversions.state_from_messages(self.robot, chosen, stamp_ns / 1e9)

    def _open(self, stamp_ns: int | None = None) -> BagWriter:
        if self.bag is None:
            self.bag_dir.mkdir(parents=True, exist_ok=True)
            self.bag = BagWriter(
                next_run_dir(self.bag_dir),
                robot=self.robot,
                storage=self.storage,  # type: ignore[arg-type]
                distro=self.distro,  # type: ignore[arg-type]
                joint_names=self.joint_names,
                camera=self.camera,
                info=self.info,
            ).open(stamp_ns=None if stamp_ns is None else stamp_ns - 1)
            log.info("logger: recording %s", self.bag.path)
        return self.bag

    def _mark_gap(self, stamp_ns: int | None) -> None:
        if self._gap:
            self._open().event(schema.TICKS_GAP, stamp_ns=stamp_ns, ticks=self._gap, reason="lost")
            self._gap = 0

    def _write_event(self, event: dict[str, Any]) -> None:
        stamp = int(event["time_ns"]) if "time_ns" in event else None
        bag = self._open(stamp)
        self._mark_gap(stamp)
        kind = event["event"]
        fields = {k: v for k, v in event.items() if k not in ("event", "time_ns", "seq")}
        if kind == schema.EPISODE_START:
            bag.start_episode(stamp_ns=stamp, **fields)
        elif kind == schema.EPISODE_END:
            if bag.episode is not None:  # an end for an episode whose start was lost
                bag.end_episode(stamp_ns=stamp, **fields)
        elif kind == schema.MODEL_VERSION:
            bag.set_model_version(fields["model_version"], stamp_ns=stamp)
        else:
            bag.event(kind, stamp_ns=stamp, **fields)

    def _events_until(self, count: int, *, final: bool) -> bool:
        """Write the events with seq < count in order; False while one of them may still be on its way."""
        while self._next_event < count:
            seq = self._next_event
            if seq in self._events:
                self._write_event(self._events.pop(seq))
            elif final or self._newest_event > seq:
                self.events_lost += 1
                if seq - 1 not in self._events_missing:  # one warning per run of lost events
                    log.warning("logger: event %d never arrived (later ones did)", seq)
                self._events_missing.add(seq)
            else:
                return False
            self._next_event += 1
        return True

    def _events_of(self, tick: int) -> None:
        """Write the events here, in order, that precede `tick` (for a tick that was lost)."""
        while self._next_event in self._events and int(self._events[self._next_event]["tick"]) <= tick:
            self._write_event(self._events.pop(self._next_event))
            self._next_event += 1

    def _overdue(self, tick: int) -> bool:
        return max(self._newest.values(), default=-1) - tick > self.max_pending

    def _robot_events_before(self, stamp_ns: int | None) -> None:
        ready = [e for e in self._robot_events if stamp_ns is None or int(e.get("time_ns", 0)) <= stamp_ns]
        self._robot_events = [e for e in self._robot_events if e not in ready]
        for event in ready:
            self._write_event(event)

    def _flush(self, final: bool) -> None:
        while True:
            tick = self._next
            entry = self._ticks.get(tick)
            if entry is not None and len(entry.vectors) == len(_VECTORS):
                if not self._events_until(entry.events, final=final or self._overdue(tick)):
                    return  # an event before this tick is still on its way
                self._robot_events_before(entry.stamp_ns)
                self._write_tick(entry)
            else:
                missing = [t for t, name in _VECTORS.items() if entry is None or name not in entry.vectors]
                proven = any(self._newest.get(t, -1) > tick for t in missing)
                if not (proven or self._overdue(tick) or (final and tick <= max(self._ticks, default=-1))):
                    break
                self._events_of(tick)
                self.lost += 1
                self._gap += 1
                log.warning(
                    "logger: tick %d lost (missing %s)", tick, ", ".join(_VECTORS[t] for t in missing)
                )
            self._ticks.pop(tick, None)
            self._next = tick + 1
        if final:
            self._events_until(self._newest_event + 1, final=True)
            self._robot_events_before(None)
            self._mark_gap(None)

    def _write_tick(self, entry: _Tick) -> None:
        bag = self._open(entry.stamp_ns)
        self._mark_gap(entry.stamp_ns)
        bag.append(
            observation=entry.vectors["observation"],
            action=entry.vectors["action"],
            command=entry.vectors["command"],
            state=self._state_at(entry.stamp_ns),
            image=entry.image if self.camera else None,
            stamp_ns=entry.stamp_ns,
        )
        self.written += 1
