"""Write one deployment run as a rosbag2 folder (MCAP or sqlite3, Jazzy or Humble metadata) without ROS.

`BagWriter` is a context manager: whatever happens inside (Ctrl-C included), leaving it closes the bag, so
metadata.yaml is written and the run stays readable. An episode still open at that point is ended with
`success: false, interrupted: true`.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np
from rosbags.interfaces import (
    Connection,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from ruamel.yaml import YAML

from simdist import atomic
from simdist.bags import conversions, schema
from simdist.errors import BagError
from simdist.hardware.state import RobotState

Storage = Literal["mcap", "sqlite3"]
STORAGES: dict[str, StoragePlugin] = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}

# rosbag2 metadata versions: Jazzy writes 9 (QoS profiles as a YAML list). Humble's rosbag2 (0.15) writes 5 and
# parses offered_qos_profiles as a string, which rosbags writes for version 8; `_humble_metadata` then rewrites the
# version-8 metadata.yaml to the fields Humble knows.
METADATA_VERSION: dict[str, int] = {"jazzy": 9, "humble": 5}

RUN_PREFIX = "run_"
_RUN_RE = re.compile(rf"^{RUN_PREFIX}(\d+)$")

_ZERO = QosTime(sec=0, nsec=0)
# What the deploy nodes publish with (rclcpp's default profile), so `ros2 bag play` offers the same QoS.
DEFAULT_QOS = Qos(
    history=QosHistory.KEEP_LAST,
    depth=10,
    reliability=QosReliability.RELIABLE,
    durability=QosDurability.VOLATILE,
    deadline=_ZERO,
    lifespan=_ZERO,
    liveliness=QosLiveliness.AUTOMATIC,
    liveliness_lease_duration=_ZERO,
    avoid_ros_namespace_conventions=False,
)


def next_run_dir(bag_dir: Path | str) -> Path:
    """The next free `run_NN` path in `bag_dir` (run_01, run_02, ...; more digits after run_99). Not created."""
    root = Path(bag_dir)
    taken = [int(m.group(1)) for p in root.glob(f"{RUN_PREFIX}*") if (m := _RUN_RE.match(p.name))]
    number = max(taken, default=0) + 1
    return root / f"{RUN_PREFIX}{number:02d}"


def _simdist_version() -> str:
    try:
        from importlib.metadata import version

        return version("simdist")
    except Exception:  # not installed (source checkout on sys.path): the version is informational only
        return "unknown"


class BagWriter:
    """Append one control tick at a time; mark episodes, model versions and outcomes with events.

    Args:
        path: the bag folder to create (must not exist); see `next_run_dir`.
        robot: the task's robot (`simdist.robots` name); selects the robot-state topics (`schema.robot_topics`).
        storage: "mcap" (default) or "sqlite3".
        distro: "jazzy" (default, metadata version 9) or "humble" (metadata version 5).
        joint_names: names written in JointState when a `RobotState` carries none.
        camera: also create the camera topic.
        info: extra JSON-serialisable fields for the run_start event (task, profile, ...).

    Raises:
        BagError: the folder exists or cannot be created.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        robot: str,
        storage: Storage = "mcap",
        distro: conversions.Distro = "jazzy",
        joint_names: Sequence[str] = (),
        camera: bool = False,
        reward: bool = False,
        info: dict[str, Any] | None = None,
    ) -> None:
        if storage not in STORAGES:
            raise ValueError(f"unknown bag storage '{storage}' (valid: {', '.join(STORAGES)})")
        self.path = Path(path)
        self.robot = robot
        self.storage = storage
        self.distro = distro
        self.topics = schema.topics_for(robot, camera=camera, reward=reward)
        self.joint_names = tuple(joint_names)
        self._typestore = conversions.typestore_for(distro)
        self._info = dict(info or {})
        self._writer: Writer | None = None
        self._connections: dict[str, Connection] = {}
        self._last_ns = 0
        self._episode: int | None = None
        self._episodes = 0
        self._ticks = 0
        self._sizes: dict[str, int] = {}
        self._model_version: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def open(self, *, stamp_ns: int | None = None) -> BagWriter:
        """Create the bag and write run_start (at `stamp_ns`, default now: a recorder that joins a run late gives
        the first tick's time, so the ticks keep their own times)."""
        version = 8 if self.distro == "humble" else METADATA_VERSION[self.distro]
        try:
            writer = Writer(self.path, version=version, storage_plugin=STORAGES[self.storage])  # type: ignore[arg-type]
            writer.open()
        except (WriterError, OSError) as exc:
            raise BagError(f"{self.path}: cannot create bag ({exc})") from None
        self._writer = writer
        for topic in self.topics:
            self._connections[topic] = writer.add_connection(
                topic,
                schema.TOPIC_TYPES[topic],
                typestore=self._typestore,
                offered_qos_profiles=[DEFAULT_QOS],
            )
        self.event(
            schema.RUN_START,
            stamp_ns=stamp_ns,
            schema_version=schema.SCHEMA_VERSION,
            robot=self.robot,
            distro=self.distro,
            storage=self.storage,
            topics=list(self.topics),
            joint_names=list(self.joint_names),
            simdist_version=_simdist_version(),
            **self._info,
        )
        return self

    def close(self, *, reason: str | None = None) -> None:
        """End an open episode (as interrupted when `reason` is given), write run_end and metadata.yaml.

        Idempotent. A second Ctrl-C while closing is held back until the bag is complete.
        """
        if self._writer is None:
            return
        with _sigint_deferred():
            try:
                if self._episode is not None:
                    fields = {"interrupted": True, "reason": reason} if reason else {}
                    self.end_episode(success=False, **fields)
                self.event(schema.RUN_END, episodes=self._episodes, ticks=self._ticks, reason=reason)
            finally:
                writer, self._writer = self._writer, None
                writer.close()
                if self.distro == "humble":
                    _humble_metadata(self.path / "metadata.yaml")

    def __enter__(self) -> BagWriter:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        reason = None if exc_type is None else exc_type.__name__
        self.close(reason=reason)

    # -- content ---------------------------------------------------------------------------------------------
    def _stamp(self, stamp_ns: int | None) -> int:
        # Every tick and every event gets its own, strictly increasing time, so the reader can tell unambiguously
        # which ticks lie inside an episode even when the wall clock repeats or steps back.
        wanted = time.time_ns() if stamp_ns is None else int(stamp_ns)
        self._last_ns = max(wanted, self._last_ns + 1)
        return self._last_ns

    def _write(self, topic: str, msg: Any, stamp_ns: int) -> None:
        if self._writer is None:
            raise BagError(f"{self.path}: bag is not open (use BagWriter as a context manager)")
        data = self._typestore.serialize_cdr(msg, schema.TOPIC_TYPES[topic])
        self._writer.write(self._connections[topic], stamp_ns, data)

    def event(self, kind: str, *, stamp_ns: int | None = None, **fields: Any) -> int:
        """Write one JSON event on /simdist/events; returns its bag time (ns)."""
        t = self._stamp(stamp_ns)
        payload = {"event": kind, "time_ns": t, **fields}
        self._write(schema.EVENTS, conversions.string_msg(self._typestore, json.dumps(payload)), t)
        return t

    def start_episode(self, *, model_version: str, stamp_ns: int | None = None, **fields: Any) -> int:
        """Open the next episode (an open one is ended as unsuccessful first); returns its index."""
        if self._episode is not None:
            self.end_episode(success=False, stamp_ns=stamp_ns, reason="next episode started")
        self._episode = self._episodes
        self._episodes += 1
        self._model_version = model_version
        self.event(
            schema.EPISODE_START,
            stamp_ns=stamp_ns,
            episode=self._episode,
            model_version=model_version,
            **fields,
        )
        return self._episode

    def end_episode(self, *, success: bool, stamp_ns: int | None = None, **fields: Any) -> None:
        if self._episode is None:
            raise BagError(f"{self.path}: end_episode without start_episode")
        self.event(
            schema.EPISODE_END, stamp_ns=stamp_ns, episode=self._episode, success=bool(success), **fields
        )
        self._episode = None

    def set_model_version(self, model_version: str, *, stamp_ns: int | None = None) -> None:
        """Mark a hot swap: ticks after this event were planned with `model_version`."""
        self._model_version = model_version
        self.event(schema.MODEL_VERSION, stamp_ns=stamp_ns, model_version=model_version)

    def _check_size(self, name: str, values: np.ndarray) -> np.ndarray:
        flat = np.asarray(values, dtype=np.float32).reshape(-1)
        expected = self._sizes.setdefault(name, flat.size)
        if flat.size != expected:
            raise ValueError(f"{name} has {flat.size} values, earlier ticks of this run had {expected}")
        return flat

    def append(
        self,
        *,
        observation: np.ndarray,
        action: np.ndarray,
        command: np.ndarray,
        state: RobotState | None = None,
        image: np.ndarray | None = None,
        reward: float | None = None,
        stamp_ns: int | None = None,
    ) -> int:
        """Write one control tick: the vectors the model saw and chose, the task command and the robot state.

        `reward` (bags opened with `reward=True`) is what the robot reported with this tick's measurement: the reward
        earned by the PREVIOUS tick's action, so the reader gives it to the step before (give None when the previous
        tick is not in the bag). Returns the tick's bag time (ns). Vector sizes must stay the same for the whole run.
        """
        ts = self._typestore
        vectors = {
            schema.OBSERVATION: self._check_size("observation", observation),
            schema.ACTION: self._check_size("action", action),
            schema.COMMAND: self._check_size("command", command),
        }
        t = self._stamp(stamp_ns)
        for topic, values in vectors.items():
            self._write(topic, conversions.vector_msg(ts, values, topic.rsplit("/", 1)[-1]), t)
        if state is not None:
            if not state.joint_names and self.joint_names:
                state = RobotState(**{**state.__dict__, "joint_names": self.joint_names})
            for topic, msg in conversions.state_messages(ts, state, self.topics, t):
                self._write(topic, msg, t)
        if reward is not None:
            if schema.REWARD not in self.topics:
                raise BagError(f"{self.path}: reward given but the bag was opened without reward=True")
            self._write(schema.REWARD, conversions.vector_msg(ts, np.float32([reward]), "reward"), t)
        if image is not None:
            if schema.CAMERA not in self.topics:
                raise BagError(f"{self.path}: image given but the bag was opened without camera=True")
            self._write(schema.CAMERA, conversions.image_msg(ts, t, image), t)
        self._ticks += 1
        return t

    @property
    def episode(self) -> int | None:
        """Index of the open episode, or None between episodes."""
        return self._episode


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT while the bag is being finalised; re-raise it afterwards (main thread only)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        # Signal handlers can only be swapped on the main thread, and a handler installed from C cannot be restored.
        yield
        return
    received: list[tuple[int, Any]] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(*received[0])


def _humble_metadata(metapath: Path) -> None:
    """Rewrite a version-8 metadata.yaml to Humble's version 5, atomically."""
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    data = yaml.load(metapath.read_text())
    info = data["rosbag2_bagfile_information"]
    topics = [
        {
            "topic_metadata": {
                key: entry["topic_metadata"][key]
                for key in ("name", "type", "serialization_format", "offered_qos_profiles")
            },
            "message_count": entry["message_count"],
        }
        for entry in info["topics_with_message_count"]
    ]
    humble = {
        "version": METADATA_VERSION["humble"],
        "storage_identifier": info["storage_identifier"],
        "duration": info["duration"],
        "starting_time": info["starting_time"],
        "message_count": info["message_count"],
        "topics_with_message_count": topics,
        "compression_format": info["compression_format"],
        "compression_mode": info["compression_mode"],
        "relative_file_paths": info["relative_file_paths"],
        "files": info["files"],
    }
    with atomic.atomic_path(metapath) as tmp, tmp.open("w") as stream:
        yaml.dump({"rosbag2_bagfile_information": humble}, stream)
