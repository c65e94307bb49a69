"""Write episodes into HDF5 shards; each shard and the manifest are replaced atomically.

An interrupted run leaves every completed shard readable and `manifest.json` describing exactly those shards;
`ShardWriter(..., resume=True)` continues after them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from simdist import atomic
from simdist.data.schema import (
    IMAGE_SHAPE,
    MANIFEST_NAME,
    NORMALISED_FIELDS,
    OPTIONAL_FIELDS,
    SCALAR_FIELDS,
    SCHEMA_VERSION,
    STEP_FIELDS,
    VECTOR_FIELDS,
    optional_fields,
    shard_name,
)
from simdist.data.stats import RunningStats
from simdist.errors import DatasetError


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON durably and all at once (readers never see half a file)."""
    atomic.write_json(path, data, sort_keys=True)


@dataclass(frozen=True)
class ResumeInfo:
    """What an existing output folder already holds."""

    complete_shards: list[str]
    episodes: int
    steps: int
    next_shard: int
    next_episode_id: int


def resume(out_dir: str | Path) -> ResumeInfo:
    """Which shards of `out_dir` are complete (listed in the manifest and present); empty when nothing is there."""
    out = Path(out_dir)
    path = out / MANIFEST_NAME
    if not path.is_file():
        return ResumeInfo([], 0, 0, 0, 0)
    manifest = json.loads(path.read_text())
    shards = manifest.get("shards", [])
    done = [s["file"] for s in shards if (out / s["file"]).is_file()]
    if len(done) != len(shards):
        missing = next(s["file"] for s in shards if not (out / s["file"]).is_file())
        raise DatasetError(f"{out / missing}: listed in the manifest but missing")
    return ResumeInfo(
        complete_shards=done,
        episodes=sum(s["episodes"] for s in shards),
        steps=sum(s["steps"] for s in shards),
        next_shard=len(shards),
        next_episode_id=int(manifest.get("next_episode_id", 0)),
    )


class ShardWriter:
    """Buffer whole episodes and flush them as `shard_NNNNN.h5` once `steps_per_shard` steps are buffered.

    `manifest_info` must hold `task`, `preset` and `config_hash`; any other keys are kept under `info`.
    Episodes without an `episode` field get consecutive ids; without `step`, 0..N-1.
    """

    def __init__(
        self,
        out_dir: str | Path,
        manifest_info: Mapping[str, Any],
        *,
        steps_per_shard: int = 200_000,
        chunk_steps: int = 4096,
        compression: str | None = None,
        resume: bool = False,
    ) -> None:
        missing = [k for k in ("task", "preset", "config_hash") if k not in manifest_info]
        if missing:
            raise DatasetError(f"manifest_info lacks {', '.join(missing)}")
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.steps_per_shard = steps_per_shard
        self.chunk_steps = chunk_steps
        self.compression = compression
        self.info = dict(manifest_info)
        self._buffer: list[tuple[dict[str, np.ndarray], dict[str, float]]] = []
        self._buffered_steps = 0
        self._shards: list[dict[str, Any]] = []
        self._dims: dict[str, int] | None = None
        self._optional: tuple[str, ...] | None = None  # the optional fields every episode carries
        self._param_columns: list[str] | None = None
        self._next_episode_id = 0
        manifest_path = self.out / MANIFEST_NAME
        if manifest_path.exists():
            if not resume:
                raise DatasetError(
                    f"{manifest_path}: dataset already exists (pass resume=True to continue it)"
                )
            self._load_existing(manifest_path)
        for stray in self.out.glob(".shard_*.tmp*"):  # a crash mid-flush leaves only a temporary name
            stray.unlink()

    def _load_existing(self, path: Path) -> None:
        manifest = json.loads(path.read_text())
        if manifest.get("config_hash") != self.info["config_hash"]:
            raise DatasetError(
                f"{path}: config hash {manifest.get('config_hash')} differs from {self.info['config_hash']}; "
                "use a new output folder"
            )
        resume(self.out)  # raises if a listed shard is missing
        self._shards = list(manifest["shards"])
        self._dims = manifest.get("dims")
        self._optional = optional_fields(manifest) if manifest.get("dims") else None
        self._param_columns = manifest.get("param_columns")
        self._next_episode_id = int(manifest.get("next_episode_id", 0))
        listed = {s["file"] for s in self._shards}
        for path_ in self.out.glob("shard_*.h5"):  # written after the last manifest update: not trusted
            if path_.name not in listed:
                path_.unlink()

    # -- adding ------------------------------------------------------------------------------------------

    def add_episode(self, episode: Mapping[str, np.ndarray], params: Mapping[str, float]) -> None:
        """Buffer one whole episode (dict of per-step arrays) and its randomised dynamics parameters."""
        arrays = self._validate(episode)
        columns = sorted(params)
        if self._param_columns is None:
            self._param_columns = columns
        elif columns != self._param_columns:
            raise DatasetError(f"episode params {columns} differ from earlier episodes {self._param_columns}")
        self._buffer.append((arrays, {k: float(v) for k, v in params.items()}))
        self._buffered_steps += len(arrays["proprio"])
        if self._buffered_steps >= self.steps_per_shard:
            self.flush()

    def _validate(self, episode: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(episode["proprio"]) if "proprio" in episode else 0
        if n == 0:
            raise DatasetError("episode has no 'proprio' steps")
        arrays: dict[str, np.ndarray] = {}
        for name, dtype in STEP_FIELDS.items():
            if name not in episode:
                if name == "episode":
                    arrays[name] = np.full(n, self._next_episode_id, dtype=dtype)
                    continue
                if name == "step":
                    arrays[name] = np.arange(n, dtype=dtype)
                    continue
                raise DatasetError(f"episode lacks field '{name}'")
            arrays[name] = np.asarray(episode[name]).astype(dtype, copy=False)
        for name, dtype in OPTIONAL_FIELDS.items():
            if name in episode:
                arrays[name] = np.asarray(episode[name]).astype(dtype, copy=False)
        if "image" in arrays and arrays["image"].shape[1:] != IMAGE_SHAPE:
            raise DatasetError(f"image has shape {arrays['image'].shape[1:]}, expected {IMAGE_SHAPE}")
        if "expert_action" in arrays and arrays["expert_action"].shape[1:] != arrays["action"].shape[1:]:
            raise DatasetError(
                f"expert_action has shape {arrays['expert_action'].shape}, action {arrays['action'].shape}"
            )
        for name, array in arrays.items():
            if len(array) != n:
                raise DatasetError(f"field '{name}' has {len(array)} steps, 'proprio' has {n}")
            if name in VECTOR_FIELDS and array.ndim != 2:
                raise DatasetError(f"field '{name}' must be (N, dim), got {array.shape}")
            if name in SCALAR_FIELDS and array.ndim != 1:
                raise DatasetError(f"field '{name}' must be (N,), got {array.shape}")
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise DatasetError(f"field '{name}' has non-finite values")
        if (arrays["episode"] != arrays["episode"][0]).any():
            raise DatasetError("field 'episode' must be constant within an episode")
        dims = {name: int(arrays[name].shape[1]) for name in VECTOR_FIELDS}
        optional = tuple(name for name in OPTIONAL_FIELDS if name in arrays)
        if self._dims is None:
            self._dims, self._optional = dims, optional
        elif dims != self._dims:
            raise DatasetError(f"episode dims {dims} differ from earlier episodes {self._dims}")
        elif optional != self._optional:
            raise DatasetError(
                f"episode carries {list(optional)}, earlier episodes {list(self._optional or ())}"
            )
        self._next_episode_id = max(self._next_episode_id, int(arrays["episode"][0]) + 1)
        return arrays

    # -- flushing ----------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write buffered episodes as the next shard, then the manifest (no-op when the buffer is empty)."""
        if not self._buffer:
            return
        index = len(self._shards)
        name = shard_name(index)
        final = self.out / name
        episodes = [e for e, _ in self._buffer]
        lengths = np.array([len(e["proprio"]) for e in episodes], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        total = int(offsets[-1])
        stats: dict[str, dict[str, Any]] = {}
        with atomic.atomic_path(final) as tmp:
            with h5py.File(tmp, "w") as fh:
                fh.attrs["schema_version"] = SCHEMA_VERSION
                for field in episodes[0]:
                    data = np.concatenate([e[field] for e in episodes])
                    chunk = (min(self.chunk_steps, total),) + data.shape[1:]
                    fh.create_dataset(field, data=data, chunks=chunk, compression=self.compression)
                    if field in NORMALISED_FIELDS:
                        running = RunningStats()
                        running.update(data)
                        stats[field] = running.to_json()
                fh.create_dataset("episode_offsets", data=offsets)
                fh.create_dataset(
                    "episode_ids", data=np.array([e["episode"][0] for e in episodes], dtype=np.int64)
                )
                columns = self._param_columns or []
                table = np.array([[p[c] for c in columns] for _, p in self._buffer], dtype=np.float32)
                params = fh.create_dataset("params", data=table.reshape(len(episodes), len(columns)))
                params.attrs["columns"] = json.dumps(columns)
        self._shards.append({"file": name, "episodes": len(episodes), "steps": total, "stats": stats})
        self._buffer, self._buffered_steps = [], 0
        self._write_manifest(complete=False)

    def close(self) -> None:
        """Flush the last partial shard and mark the dataset complete."""
        self.flush()
        self._write_manifest(complete=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        # on an exception keep only completed shards; the buffered episodes are dropped on purpose
        if exc_type is None:
            self.close()

    def _write_manifest(self, *, complete: bool) -> None:
        totals = {field: RunningStats() for field in NORMALISED_FIELDS}
        for shard in self._shards:
            for field, data in shard["stats"].items():
                totals[field].merge(RunningStats.from_json(data))
        normalizer = {
            field: {"mean": [float(x) for x in s.mean], "std": [float(x) for x in s.std], "count": s.count}
            for field, s in totals.items()
            if s.count and s.mean is not None
        }
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "task": self.info["task"],
            "preset": self.info["preset"],
            "config_hash": self.info["config_hash"],
            "info": {k: v for k, v in self.info.items() if k not in ("task", "preset", "config_hash")},
            "dims": self._dims,
            "has_image": "image" in (self._optional or ()),
            "optional_fields": list(self._optional or ()),
            "param_columns": self._param_columns or [],
            "shards": self._shards,
            "episodes": sum(s["episodes"] for s in self._shards),
            "steps": sum(s["steps"] for s in self._shards),
            "next_episode_id": self._next_episode_id,
            "normalizer": normalizer,
            "complete": complete,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        write_json_atomic(self.out / MANIFEST_NAME, manifest)
