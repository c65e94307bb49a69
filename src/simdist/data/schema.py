"""Field names, dtypes and shapes of the on-disk dataset (one place, shared by writer, reader and windows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from simdist.errors import DatasetError

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
SHARD_PATTERN = "shard_{index:05d}.h5"

# per-step fields: name -> (dtype, trailing shape or None when it comes from the data)
STEP_FIELDS: dict[str, np.dtype] = {
    "proprio": np.dtype(np.float32),
    "command": np.dtype(np.float32),
    "action": np.dtype(np.float32),
    "reward": np.dtype(np.float32),
    "value": np.dtype(np.float32),
    "expert_flag": np.dtype(np.bool_),
    "episode": np.dtype(np.int64),
    "step": np.dtype(np.int32),
}
# per-step fields a corpus may carry; a source reads the ones every episode has. image: (N, 64, 64, 3);
# expert_action: (N, action dim), the final expert's answer at every step (DAgger's label)
OPTIONAL_FIELDS: dict[str, np.dtype] = {"image": np.dtype(np.uint8), "expert_action": np.dtype(np.float32)}
IMAGE_SHAPE = (64, 64, 3)
VECTOR_FIELDS = ("proprio", "command", "action")  # (N, dim)
SCALAR_FIELDS = ("reward", "value", "expert_flag", "episode", "step")  # (N,)
# fields whose z-score statistics the manifest carries (the model's Normalizer reads them)
NORMALISED_FIELDS = ("proprio", "command", "action", "reward", "value")


def shard_name(index: int) -> str:
    return SHARD_PATTERN.format(index=index)


def optional_fields(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """The optional fields a dataset's manifest says every episode carries (older manifests name only `has_image`)."""
    names = manifest.get("optional_fields")
    if names is None:
        names = ["image"] if manifest.get("has_image") else []
    unknown = sorted(set(names) - set(OPTIONAL_FIELDS))
    if unknown:
        raise DatasetError(f"manifest lists unknown optional fields {unknown}")
    return tuple(name for name in OPTIONAL_FIELDS if name in names)
