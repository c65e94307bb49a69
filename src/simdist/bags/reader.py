"""Read deployment runs back into per-episode numpy arrays for finetuning; refuse bags that are not whole.

Reading never writes: a refused bag is left exactly as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import Reader, ReaderError
from ruamel.yaml import YAML

from simdist.bags import conversions, schema
from simdist.errors import BagError

REQUIRED_TOPICS: tuple[str, ...] = schema.COMMON_TOPICS


def _distro_of(metapath: Path) -> str:
    """Humble for metadata version <= 5, else Jazzy (both decode these standard types alike)."""
    try:
        info = YAML(typ="safe").load(metapath.read_text())["rosbag2_bagfile_information"]
        return "humble" if int(info["version"]) <= 5 else "jazzy"
    except Exception:  # a broken metadata.yaml is reported by rosbags' Reader with its own reason
        return "jazzy"


def read_topics(
    bag_path: Path | str, topics: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, list[tuple[int, Any]]]:
    """Every message of `topics` (and of the `optional` ones the bag has) as (bag time ns, deserialised message),
    checked against the schema.

    Raises:
        BagError: the bag is missing, unreadable, truncated or empty, or a topic is missing or has the wrong type.
    """
    path = Path(bag_path)
    wanted = tuple(topics)
    if not (path / "metadata.yaml").is_file():
        if not path.exists():
            raise BagError(f"{path}: no such bag")
        raise BagError(
            f"{path}: not a complete rosbag2 folder (metadata.yaml is missing; was the run killed?)"
        )
    try:
        with Reader(path) as reader:
            if reader.message_count == 0:
                raise BagError(f"{path}: empty bag (no messages)")
            by_topic = {c.topic: c for c in reader.connections}
            wanted += tuple(t for t in optional if t in by_topic and t not in wanted)
            for topic in wanted:
                if topic not in by_topic:
                    raise BagError(f"{path}: missing topic {topic}")
                expected = schema.TOPIC_TYPES[topic]
                if by_topic[topic].msgtype != expected:
                    raise BagError(
                        f"{path}: topic {topic} has type {by_topic[topic].msgtype}, expected {expected}"
                    )
            typestore = conversions.typestore_for(_distro_of(path / "metadata.yaml"))
            out: dict[str, list[tuple[int, Any]]] = {topic: [] for topic in wanted}
            connections = [by_topic[t] for t in wanted]
            topic = ""
            try:
                for connection, timestamp, raw in reader.messages(connections=connections):
                    topic = connection.topic
                    out[topic].append((timestamp, typestore.deserialize_cdr(raw, connection.msgtype)))
            except ReaderError:
                raise
            except (
                Exception
            ) as exc:  # a corrupt payload surfaces as struct/index/value errors from the decoder
                raise BagError(
                    f"{path}: cannot decode a message on {topic} ({type(exc).__name__}: {exc})"
                ) from None
            for connection in connections:
                got = len(out[connection.topic])
                if got != connection.msgcount:
                    raise BagError(
                        f"{path}: topic {connection.topic} has {got} messages, metadata.yaml promises "
                        f"{connection.msgcount} (truncated bag?)"
                    )
            return out
    except ReaderError as exc:
        raise BagError(f"{path}: unreadable bag ({exc})") from None
    except (OSError, EOFError) as exc:
        raise BagError(f"{path}: unreadable bag ({type(exc).__name__}: {exc})") from None


def _events(path: Path, messages: list[tuple[int, Any]]) -> list[tuple[int, dict[str, Any]]]:
    events = []
    for t, msg in messages:
        try:
            payload = json.loads(conversions.text_from_msg(msg))
        except json.JSONDecodeError:
            raise BagError(f"{path}: topic {schema.EVENTS} carries a message that is not JSON") from None
        if not isinstance(payload, dict) or "event" not in payload:
            raise BagError(f"{path}: topic {schema.EVENTS} carries a JSON message without an 'event' field")
        events.append((t, payload))
    return events


def _step_rewards(path: Path, obs_t: np.ndarray, messages: list[tuple[int, Any]]) -> np.ndarray:
    """(N,) the reward of each recorded tick's action: the reward message after the tick and no later than the next
    recorded tick (the loop writes it with the next tick's observation); NaN where there is none."""
    rew_t, values = _vectors(path, schema.REWARD, messages)
    out = np.full(len(obs_t), np.nan, dtype=np.float32)
    if not len(rew_t):
        return out
    if values.shape[1] != 1:
        raise BagError(
            f"{path}: topic {schema.REWARD} carries {values.shape[1]} values per message, expected 1"
        )
    after = np.searchsorted(rew_t, obs_t, side="right")
    next_tick = np.append(obs_t[1:], np.iinfo(np.int64).max)
    found = after < len(rew_t)
    found[found] &= rew_t[after[found]] <= next_tick[found]
    out[found] = values[after[found], 0]
    return out


def _vectors(path: Path, topic: str, messages: list[tuple[int, Any]]) -> tuple[np.ndarray, np.ndarray]:
    times = np.array([t for t, _ in messages], dtype=np.int64)
    rows = [conversions.vector_from_msg(m) for _, m in messages]
    sizes = {r.size for r in rows}
    if len(sizes) > 1:
        raise BagError(f"{path}: topic {topic} mixes vector sizes {sorted(sizes)}")
    width = sizes.pop() if sizes else 0
    values = np.stack(rows).astype(np.float32) if rows else np.zeros((0, width), np.float32)
    return times, values


def read_episodes(bag_path: Path | str) -> list[dict[str, np.ndarray]]:
    """One dict of per-step arrays per episode of a run (per gap-free stretch of one), in recorded order.

        Keys: `proprio` (N, O) float32 from /simdist/observation, `action` (N, A), `command` (N, C) (the latest
        command at each step), `reward` (N,) float32 (the reward each step's action earned, from /simdist/reward at
        the next tick; NaN where the bag has none: a robot that reports no reward, the last tick of a run, a gap),
        `step` (N,) int64 from 0, `timestamp_ns` (N,) int64, `model_version` (N,) str (the model that chose each
        action), `success` (N,) bool (the episode's outcome, repeated so every key slices alike), `terminal` (N,) bool
        (True at the last step of an episode that terminated: a fall or a protective stop, its end event's
        `terminated`, or for bags without it the metrics' `fell`; nothing follows it, unlike a time-out) and `episode_index`
        (N,) int64, the episode's number within this run (not unique across runs, hence not `episode`). Episodes
        without steps are dropped; an episode that never ended counts as unsuccessful.

    A `ticks_gap` event (ticks the controller missed or the recorder lost) splits an episode: the dicts on either
    side share `episode_index`, differ in `segment` (N,) int64, and `step` counts the lost ticks (it is the tick's
    true step within the episode), so nothing downstream takes the steps across a hole as consecutive. A step whose
    observation, action or command holds a non-finite value (a sensor's NaN, logged as it came) is such a hole
    too: it is dropped and the episode split there, so one bad reading cannot reach a finetune.

        Raises:
            BagError: naming the bag and, where one is at fault, the topic.
    """
    path = Path(bag_path)
    data = read_topics(path, REQUIRED_TOPICS, optional=(schema.REWARD,))
    events = _events(path, data[schema.EVENTS])
    obs_t, obs = _vectors(path, schema.OBSERVATION, data[schema.OBSERVATION])
    act_t, act = _vectors(path, schema.ACTION, data[schema.ACTION])
    cmd_t, cmd = _vectors(path, schema.COMMAND, data[schema.COMMAND])
    reward = _step_rewards(path, obs_t, data.get(schema.REWARD, []))

    # Model version in force at any time: the latest run_start / episode_start / model_version that names one.
    version_t = np.array([t for t, e in events if "model_version" in e], dtype=np.int64)
    version_v = [str(e["model_version"]) for _, e in events if "model_version" in e]

    gaps = [(t, e) for t, e in events if e["event"] == schema.TICKS_GAP]
    gap_t = np.array([t for t, _ in gaps], dtype=np.int64)
    gap_n = np.array([int(e.get("ticks", 0)) for _, e in gaps], dtype=np.int64)

    # Episode intervals [start, end]; an unfinished episode runs until the next start or the end of the bag.
    intervals: list[tuple[int, int, int, bool, bool]] = []  # (index, start, end, success, fell)
    open_start: tuple[int, int] | None = None
    for t, e in events:
        kind = e["event"]
        if kind == schema.EPISODE_START:
            if open_start is not None:
                intervals.append((open_start[0], open_start[1], t - 1, False, False))
            open_start = (int(e.get("episode", len(intervals))), t)
        elif kind == schema.EPISODE_END and open_start is not None:
            # `terminated` where the robot reported it (a fall, a protective stop), else the metrics' `fell`
            fell = bool(e.get("terminated", (e.get("metrics") or {}).get("fell", False)))
            intervals.append((open_start[0], open_start[1], t, bool(e.get("success", False)), fell))
            open_start = None
    if open_start is not None:
        intervals.append((open_start[0], open_start[1], np.iinfo(np.int64).max, False, False))
    if not intervals:
        raise BagError(f"{path}: topic {schema.EVENTS} marks no episode (no {schema.EPISODE_START} event)")

    episodes: list[dict[str, np.ndarray]] = []
    for index, start, end, success, fell in intervals:
        lo, hi = np.searchsorted(obs_t, start, side="left"), np.searchsorted(obs_t, end, side="right")
        alo, ahi = np.searchsorted(act_t, start, side="left"), np.searchsorted(act_t, end, side="right")
        n = int(hi - lo)
        if ahi - alo != n:
            raise BagError(
                f"{path}: topic {schema.ACTION} has {ahi - alo} messages in episode {index}, "
                f"{schema.OBSERVATION} has {n}"
            )
        if n == 0:
            continue
        step_t = obs_t[lo:hi]
        # The command in force at each step: sample-and-hold, so a command published at a lower rate works too.
        cmd_idx = np.searchsorted(cmd_t, step_t, side="right") - 1
        if cmd_idx[0] < 0:
            raise BagError(f"{path}: topic {schema.COMMAND} has no message before step 0 of episode {index}")
        ver_idx = np.searchsorted(version_t, step_t, side="right") - 1
        if ver_idx.size and ver_idx[0] < 0:
            raise BagError(f"{path}: topic {schema.EVENTS} names no model version before episode {index}")
        # Gaps inside this episode: each starts a new segment at the first step after it.
        inside = (gap_t >= start) & (gap_t <= end)
        cuts = np.searchsorted(step_t, gap_t[inside], side="right")
        segment = np.zeros(n, dtype=np.int64)
        step = np.arange(n, dtype=np.int64)
        for cut, lost in zip(cuts, gap_n[inside], strict=True):
            segment[cut:] += 1
            step[cut:] += lost
        unreadable = ~(
            np.isfinite(obs[lo:hi]).all(1)
            & np.isfinite(act[alo:ahi]).all(1)
            & np.isfinite(cmd[cmd_idx]).all(1)
        )
        segment += np.cumsum(unreadable)  # each such step ends a segment; the next one starts after it
        episode = {
            "proprio": obs[lo:hi],
            "action": act[alo:ahi],
            "command": cmd[cmd_idx],
            "reward": reward[lo:hi],
            "step": step,
            "timestamp_ns": step_t.copy(),
            "model_version": np.array([version_v[i] for i in ver_idx], dtype=str),
            "success": np.full(n, success, dtype=bool),
            "terminal": np.arange(n) == n - 1 if fell else np.zeros(n, dtype=bool),
            "episode_index": np.full(n, index, dtype=np.int64),
            "segment": segment,
        }
        for seg in np.unique(segment[~unreadable]):
            keep = (segment == seg) & ~unreadable
            episodes.append({key: values[keep] for key, values in episode.items()})
    if not episodes:
        raise BagError(f"{path}: no control steps inside any episode (topic {schema.OBSERVATION})")
    return episodes
