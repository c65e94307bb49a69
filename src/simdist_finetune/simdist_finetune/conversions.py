"""The hot-swap signal: a published dynamics version as std_msgs/String on /simdist/model_version.

The message carries JSON {"model_dir", "version", "label"}; the QoS is reliable, keep-last 1, TRANSIENT_LOCAL, so a
planner that subscribes late still gets the newest version while the publisher lives. The planner node then
re-checks `dynamics/current` of that model folder at once (the file pointer stays the source of truth).
Messages are built through a factory (full type name -> class), as in `simdist_nodes.conversions`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from simdist.bags import schema
from simdist.runtime.store import version_label

TOPIC = f"{schema.NAMESPACE}/model_version"
TYPE = schema.EVENT_TYPE  # std_msgs/msg/String
QOS_DEPTH = 1


def version_msg(m: Callable[[str], Any], model_dir: str, version: int) -> Any:
    payload = {"model_dir": str(model_dir), "version": int(version), "label": version_label(version)}
    return m(TYPE)(data=json.dumps(payload))


def version_from_msg(msg: Any) -> dict[str, Any]:
    """{"model_dir", "version", "label"}; ValueError for anything else."""
    try:
        payload = json.loads(str(msg.data))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a model version message: {exc}") from None
    if not isinstance(payload, dict) or not {"model_dir", "version"} <= payload.keys():
        raise ValueError(f"not a model version message: {str(msg.data)[:80]!r}")
    version = payload["version"]
    if isinstance(version, bool) or not isinstance(version, int | str):
        raise ValueError(f"not a model version number: {version!r}")
    try:
        number = int(version)
    except ValueError:
        raise ValueError(f"not a model version number: {version!r}") from None
    if number < 0:
        raise ValueError(f"not a model version number: {version!r}")
    return {"model_dir": str(payload["model_dir"]), "version": number, "label": version_label(number)}


def confirms(msg: Any, label: str, since_ns: int = 0) -> bool:
    """True for the planner's /simdist/events model_version event naming `label` (the swap happened), stamped at or
    after `since_ns` (the events topic keeps its history: a rollback must not take an old swap for a new one)."""
    try:
        event = json.loads(str(msg.data))
    except json.JSONDecodeError:
        return False
    return (
        isinstance(event, dict)
        and event.get("event") == schema.MODEL_VERSION
        and event.get("model_version") == label
        and isinstance(event.get("time_ns"), int)
        and event["time_ns"] >= since_ns
    )


def transient_local_qos() -> Any:
    """rclpy's QoSProfile for the topic (imports rclpy)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=QOS_DEPTH,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
