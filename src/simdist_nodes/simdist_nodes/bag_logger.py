"""The logger node's core, without rclpy: joins the planner's per-tick vectors and events with the robot's latest
state and writes them as a run_NN bag through `simdist.bags.BagWriter` (same schema as `simdist deploy`).

DDS orders messages per topic only, so the planner labels every vector with its tick and every event with the tick
it precedes. A tick is written once a later tick has started arriving (or at close), after the events that belong
before it; the state and image written with it are the ones current when its first vector arrived.
"""

from __future__ import annotations

import logging
import threading
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


@dataclass
class _Tick:
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    state: RobotState | None = None
    image: np.ndarray | None = None


class TickLogger:
    """Args:
    bag_dir: the folder whose next run_NN gets this run (created on the first tick, so an idle stack writes none).
    robot: "go2" or "ur5e"; joint_names: written when the state carries none.
    camera: also log /simdist/camera/image_raw. storage, distro: as for BagWriter. info: run_start fields.
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
    ) -> None:
        self.bag_dir = Path(bag_dir)
        self.robot = robot
        self.joint_names = joint_names
        self.camera = camera
        self.storage = storage
        self.distro = distro
        self.info = dict(info or {})
        self.bag: BagWriter | None = None
        self.written = 0
        self.dropped = 0
        self._lock = threading.Lock()  # one lock: every callback ends in the one bag
        self._latest: dict[str, tuple[float, Any]] = {}
        self._image: np.ndarray | None = None
        self._ticks: dict[int, _Tick] = {}
        self._events: list[dict[str, Any]] = []
        self._next = 0  # ticks below this are written (or dropped)

    # -- callbacks -----------------------------------------------------------------------------------------------
    def on_state(self, topic: str, msg: Any, now: float = 0.0) -> None:
        with self._lock:
            self._latest[topic] = (now, msg)

    def on_image(self, msg: Any) -> None:
        image = conversions.image_from_msg(msg)
        with self._lock:
            self._image = image

    def on_event(self, msg: Any) -> None:
        event = conversions.event_from_msg(msg)
        if "tick" not in event:
            log.warning("logger: event without a tick ignored: %s", event)
            return
        with self._lock:
            self._events.append(event)

    def on_vector(self, topic: str, msg: Any) -> None:
        tick = conversions.tick_of(msg)
        if tick is None:
            log.warning("logger: %s without a tick label ignored", topic)
            return
        with self._lock:
            if tick < self._next:
                self.dropped += 1
                return
            entry = self._ticks.get(tick)
            if entry is None:
                entry = self._ticks[tick] = _Tick(state=self._state(), image=self._image)
            entry.vectors[_VECTORS[topic]] = conversions.vector_from_msg(msg)
            self._flush(below=tick)

    def close(self) -> Path | None:
        """Write every pending tick and event, close the bag; returns its path (None when nothing was logged)."""
        with self._lock:
            self._flush(below=None)
            bag, self.bag = self.bag, None
        if bag is not None:
            bag.close()
            return bag.path
        return None

    # -- internals -----------------------------------------------------------------------------------------------
    def _state(self) -> RobotState | None:
        topics = conversions.STATE_TOPICS[self.robot]
        if not all(t in self._latest for t in topics):
            return None
        return conversions.state_from_messages(
            self.robot, {t: self._latest[t][1] for t in topics}, min(self._latest[t][0] for t in topics)
        )

    def _open(self) -> BagWriter:
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
            ).open()
            log.info("logger: recording %s", self.bag.path)
        return self.bag

    def _apply_events(self, upto: int | None) -> None:
        ready = [e for e in self._events if upto is None or int(e["tick"]) <= upto]
        if not ready:
            return
        self._events = [e for e in self._events if e not in ready]
        bag = self._open()
        for event in sorted(ready, key=lambda e: int(e["tick"])):
            kind = event["event"]
            fields = {k: v for k, v in event.items() if k not in ("event", "time_ns")}
            if kind == schema.EPISODE_START:
                bag.start_episode(**fields)
            elif kind == schema.EPISODE_END:
                if bag.episode is not None:  # an end for an episode that started before this logger did
                    bag.end_episode(**fields)
            elif kind == schema.MODEL_VERSION:
                bag.set_model_version(fields["model_version"])
            else:
                bag.event(kind, **fields)

    def _flush(self, below: int | None) -> None:
        for tick in sorted(self._ticks):
            if below is not None and tick >= below:
                break
            entry = self._ticks.pop(tick)
            self._apply_events(tick)
            self._next = tick + 1
            if len(entry.vectors) < len(_VECTORS):
                self.dropped += 1
                log.warning(
                    "logger: tick %d incomplete (%s); dropped", tick, ", ".join(sorted(entry.vectors))
                )
                continue
            bag = self._open()
            if bag.episode is None:  # ticks before the first episode this logger saw start
                self.dropped += 1
                continue
            bag.append(
                observation=entry.vectors["observation"],
                action=entry.vectors["action"],
                command=entry.vectors["command"],
                state=entry.state,
                image=entry.image if self.camera else None,
            )
            self.written += 1
        if below is None:
            self._apply_events(None)
