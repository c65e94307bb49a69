"""Bags that are not whole are refused with a BagError naming the bag and topic, and are left untouched."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from bag_helpers import good_topics, snapshot, write_raw

from simdist.bags import BagWriter, conversions, read_episodes, schema
from simdist.errors import BagError


def _refused(path: Path, *needles: str) -> BagError:
    before = snapshot(path) if path.exists() else None
    with pytest.raises(BagError) as info:
        read_episodes(path)
    message = str(info.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message
    if before is not None:
        assert snapshot(path) == before, "reading must not write"
    return info.value


def test_hand_made_good_bag_is_accepted(tmp_path: Path) -> None:
    # The control case for the refusals below: the same helper, nothing removed.
    (episode,) = read_episodes(write_raw(tmp_path / "bag", good_topics(3)))
    assert episode["proprio"][:, 0].tolist() == [100.0, 110.0, 120.0]
    assert episode["success"].all()


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("topic", schema.COMMON_TOPICS)
def test_missing_topic(tmp_path: Path, storage: str, topic: str) -> None:
    topics = good_topics()
    del topics[topic]
    _refused(write_raw(tmp_path / "bag", topics, storage=storage), "missing topic", topic)


def test_wrong_type(tmp_path: Path) -> None:
    ts = conversions.typestore_for("jazzy")
    topics = good_topics()
    topics[schema.ACTION] = (schema.EVENT_TYPE, [(100, conversions.string_msg(ts, "oops"))])
    _refused(
        write_raw(tmp_path / "bag", topics),
        schema.ACTION,
        "std_msgs/msg/String",
        "expected std_msgs/msg/Float32MultiArray",
    )


@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_truncated_mcap(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "run_01"
    with BagWriter(path, robot="go2") as bag:
        bag.start_episode(model_version="v1")
        for i in range(50):
            bag.append(observation=np.full(30, i), action=np.full(12, i), command=np.zeros(3))
        bag.end_episode(success=True)
    data = path / "run_01.mcap"
    os.truncate(data, int(data.stat().st_size * keep))
    _refused(path, "unreadable bag")


def test_sqlite_missing_rows_are_caught_by_the_message_counts(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "bag", good_topics(5), storage="sqlite3")
    with sqlite3.connect(path / "bag.db3") as db:
        (topic_id,) = db.execute("SELECT id FROM topics WHERE name = ?", (schema.ACTION,)).fetchone()
        db.execute(
            "DELETE FROM messages WHERE id = (SELECT MAX(id) FROM messages WHERE topic_id = ?)", (topic_id,)
        )
    _refused(path, schema.ACTION, "truncated")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_empty_bag(tmp_path: Path, storage: str) -> None:
    topics = {topic: (msgtype, []) for topic, (msgtype, _) in good_topics().items()}
    _refused(write_raw(tmp_path / "bag", topics, storage=storage), "empty bag")


def test_killed_run_without_metadata_and_missing_path(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "bag", good_topics())
    (path / "metadata.yaml").unlink()
    _refused(path, "metadata.yaml is missing")
    _refused(tmp_path / "nowhere", "no such bag")


def test_events_without_episode_or_json(tmp_path: Path) -> None:
    ts = conversions.typestore_for("jazzy")
    topics = good_topics()
    topics[schema.EVENTS] = (
        schema.EVENT_TYPE,
        [(1, conversions.string_msg(ts, json.dumps({"event": "run_start"})))],
    )
    _refused(write_raw(tmp_path / "a", topics), schema.EVENTS, "no episode")
    topics[schema.EVENTS] = (schema.EVENT_TYPE, [(1, conversions.string_msg(ts, "{not json"))])
    _refused(write_raw(tmp_path / "b", topics), schema.EVENTS, "not JSON")


def test_action_count_must_match_observations(tmp_path: Path) -> None:
    topics = good_topics(4)
    msgtype, actions = topics[schema.ACTION]
    topics[schema.ACTION] = (msgtype, actions[:-1])
    _refused(write_raw(tmp_path / "bag", topics), schema.ACTION, "episode 0")


def test_command_published_less_often_is_held_per_step(tmp_path: Path) -> None:
    ts = conversions.typestore_for("jazzy")
    topics = good_topics(4)  # ticks at 100, 110, 120, 130
    topics[schema.COMMAND] = (
        schema.VECTOR_TYPE,
        [(90, conversions.vector_msg(ts, [1.0])), (115, conversions.vector_msg(ts, [2.0]))],
    )
    (episode,) = read_episodes(write_raw(tmp_path / "ok", topics))
    assert episode["command"][:, 0].tolist() == [1.0, 1.0, 2.0, 2.0]
    topics[schema.COMMAND] = (schema.VECTOR_TYPE, [(105, conversions.vector_msg(ts, [1.0]))])
    _refused(write_raw(tmp_path / "late", topics), schema.COMMAND, "before step 0")
