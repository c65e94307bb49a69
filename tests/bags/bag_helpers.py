"""Helpers for bag tests: snapshots of a folder and hand-made bags that SimDist's writer would never produce."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer

from simdist.bags import conversions, schema


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` with a hash of its bytes, to prove that reading wrote nothing."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def write_raw(
    path: Path,
    messages: dict[str, tuple[str, list[tuple[int, Any]]]],
    *,
    storage: str = "mcap",
    distro: str = "jazzy",
) -> Path:
    """A bag with exactly the given topics: {topic: (msgtype, [(time_ns, message), ...])}."""
    ts = conversions.typestore_for(distro)
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        for topic, (msgtype, items) in messages.items():
            conn = writer.add_connection(topic, msgtype, typestore=ts)
            for t, msg in items:
                writer.write(conn, t, ts.serialize_cdr(msg, msgtype))
    return path


def good_topics(n: int = 3, distro: str = "jazzy") -> dict[str, tuple[str, list[tuple[int, Any]]]]:
    """One episode of `n` ticks on the four common topics, as a hand-made bag would hold them."""
    ts = conversions.typestore_for(distro)
    start = {"event": schema.EPISODE_START, "episode": 0, "model_version": "v0001"}
    end = {"event": schema.EPISODE_END, "episode": 0, "success": True}
    ticks = [100 + 10 * i for i in range(n)]
    return {
        schema.OBSERVATION: (
            schema.VECTOR_TYPE,
            [(t, conversions.vector_msg(ts, np.full(3, t))) for t in ticks],
        ),
        schema.ACTION: (schema.VECTOR_TYPE, [(t, conversions.vector_msg(ts, np.full(2, t))) for t in ticks]),
        schema.COMMAND: (schema.VECTOR_TYPE, [(t, conversions.vector_msg(ts, [1.0])) for t in ticks]),
        schema.EVENTS: (
            schema.EVENT_TYPE,
            [
                (50, conversions.string_msg(ts, json.dumps(start))),
                (1000, conversions.string_msg(ts, json.dumps(end))),
            ],
        ),
    }
