"""Episode sources the window sampler reads from: HDF5 shards on disk (lazy) or episodes held in memory.

Both expose the same small protocol, so simulated shards and real-robot logs become the same windows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np

from simdist.data.schema import (
    MANIFEST_NAME,
    NORMALISED_FIELDS,
    OPTIONAL_FIELDS,
    SCHEMA_VERSION,
    STEP_FIELDS,
    VECTOR_FIELDS,
    optional_fields,
)
from simdist.data.stats import RunningStats
from simdist.errors import DatasetError

WINDOW_FIELDS = ("proprio", "action", "command", "reward", "value", "expert_flag")


class EpisodeSource(Protocol):
    """Whole episodes addressed by position 0..len-1; `optional` names the optional fields every episode has."""

    optional: tuple[str, ...]
    has_image: bool

    def __len__(self) -> int: ...

    def lengths(self) -> np.ndarray: ...

    def episode_ids(self) -> np.ndarray: ...

    def read(self, index: int, start: int, stop: int, fields: Sequence[str]) -> dict[str, np.ndarray]: ...


class InMemoryEpisodes:
    """Episodes as a list of dicts of numpy arrays (field names as in the shards), concatenated once."""

    def __init__(self, episodes: Sequence[Mapping[str, np.ndarray]]) -> None:
        if not episodes:
            raise DatasetError("no episodes given")
        lengths = [len(e["proprio"]) for e in episodes]
        self._lengths = np.asarray(lengths, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self._lengths)]).astype(np.int64)
        self.optional = tuple(name for name in OPTIONAL_FIELDS if all(name in e for e in episodes))
        self.has_image = "image" in self.optional
        self.flat: dict[str, np.ndarray] = {}
        for field in WINDOW_FIELDS + self.optional:
            dtype = STEP_FIELDS.get(field, OPTIONAL_FIELDS.get(field))
            parts = []
            for i, e in enumerate(episodes):
                if field not in e:
                    raise DatasetError(f"episode {i} lacks field '{field}'")
                part = np.asarray(e[field]).astype(dtype, copy=False)
                if len(part) != lengths[i]:
                    raise DatasetError(
                        f"episode {i}: field '{field}' has {len(part)} steps, expected {lengths[i]}"
                    )
                parts.append(part)
            self.flat[field] = np.concatenate(parts)
        ids = [
            int(np.asarray(e["episode"]).reshape(-1)[0]) if "episode" in e else i
            for i, e in enumerate(episodes)
        ]
        self._ids = np.asarray(ids, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._lengths)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def episode_ids(self) -> np.ndarray:
        return self._ids

    def read(self, index: int, start: int, stop: int, fields: Sequence[str]) -> dict[str, np.ndarray]:
        base = int(self.offsets[index])
        return {f: self.flat[f][base + start : base + stop] for f in fields}

    def normalizer_stats(self) -> dict[str, dict[str, list[float]]]:
        """z-score statistics of these episodes (the same format as the manifest's `normalizer`)."""
        out = {}
        for field in NORMALISED_FIELDS:
            stats = RunningStats()
            stats.update(self.flat[field])
            out[field] = {"mean": list(map(float, stats.mean)), "std": list(map(float, stats.std))}
        return out


class ShardDataset:
    """A dataset folder (manifest.json + shard_NNNNN.h5) read lazily, one slice per read.

    `load()` returns the whole dataset as `InMemoryEpisodes` when it fits in `max_bytes`, which makes window
    sampling vectorised; larger datasets are sampled straight from the shards.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        path = self.root / MANIFEST_NAME
        if not path.is_file():
            raise DatasetError(f"{path}: manifest not found (not a dataset folder)")
        try:
            self.manifest: dict[str, Any] = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{path}: corrupt manifest ({exc})") from None
        version = self.manifest.get("schema_version")
        if version != SCHEMA_VERSION:
            raise DatasetError(f"{path}: schema version {version}, this code reads {SCHEMA_VERSION}")
        if not self.manifest.get("shards"):
            raise DatasetError(f"{path}: no complete shards")
        try:
            self.optional = optional_fields(self.manifest)
        except DatasetError as exc:
            raise DatasetError(f"{path}: {exc}") from None
        self.has_image = "image" in self.optional
        self.dims: dict[str, int] = dict(self.manifest["dims"])
        self._files: list[h5py.File | None] = [None] * len(self.manifest["shards"])
        shard_of, starts, lengths, ids = [], [], [], []
        for i, shard in enumerate(self.manifest["shards"]):
            handle = self._file(i)
            try:
                offsets = handle["episode_offsets"][()]
                shard_ids = handle["episode_ids"][()]
                n_steps = handle["proprio"].shape[0]
                for field in WINDOW_FIELDS + self.optional:
                    if handle[field].shape[0] != n_steps:
                        raise DatasetError(
                            f"{handle.filename}: field '{field}' has {handle[field].shape[0]} steps"
                        )
                for field in VECTOR_FIELDS:
                    if handle[field].shape[1:] != (self.dims[field],):
                        raise DatasetError(
                            f"{handle.filename}: field '{field}' has shape {handle[field].shape}"
                        )
            except KeyError as exc:
                raise DatasetError(f"{handle.filename}: missing dataset ({exc})") from None
            except OSError as exc:
                raise DatasetError(f"{handle.filename}: unreadable ({exc})") from None
            if (
                len(offsets) != shard["episodes"] + 1
                or offsets[-1] != shard["steps"]
                or n_steps != shard["steps"]
            ):
                raise DatasetError(
                    f"{handle.filename}: does not match the manifest (episodes or steps differ)"
                )
            shard_of.append(np.full(len(shard_ids), i))
            starts.append(offsets[:-1])
            lengths.append(np.diff(offsets))
            ids.append(shard_ids)
        self._shard_of = np.concatenate(shard_of).astype(np.int64)
        self._starts = np.concatenate(starts).astype(np.int64)
        self._lengths = np.concatenate(lengths).astype(np.int64)
        self._ids = np.concatenate(ids).astype(np.int64)

    def _file(self, i: int) -> h5py.File:
        handle = self._files[i]
        if handle is None:
            path = self.root / self.manifest["shards"][i]["file"]
            if not path.is_file():
                raise DatasetError(f"{path}: shard listed in the manifest is missing")
            try:
                handle = h5py.File(path, "r")
            except OSError as exc:
                raise DatasetError(f"{path}: corrupt shard ({str(exc).splitlines()[0]})") from None
            self._files[i] = handle
        return handle

    def __len__(self) -> int:
        return len(self._lengths)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def episode_ids(self) -> np.ndarray:
        return self._ids

    @property
    def task(self) -> str:
        return str(self.manifest["task"])

    @property
    def randomisation(self) -> dict[str, list[float]] | None:
        """The task's randomisation the corpus was drawn from (None: a corpus older than that record)."""
        return self.manifest.get("info", {}).get("randomisation")

    @property
    def normalizer(self) -> dict[str, dict[str, list[float]]]:
        return self.manifest["normalizer"]

    def data_hash(self) -> str:
        """A stable hash of the dataset's content description (shards, counts, statistics, config)."""
        keys = ("schema_version", "task", "preset", "config_hash", "shards", "dims")
        blob = json.dumps({k: self.manifest.get(k) for k in keys}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def read(self, index: int, start: int, stop: int, fields: Sequence[str]) -> dict[str, np.ndarray]:
        handle = self._file(int(self._shard_of[index]))
        base = int(self._starts[index])
        try:
            return {f: handle[f][base + start : base + stop] for f in fields}
        except (OSError, KeyError) as exc:
            raise DatasetError(f"{handle.filename}: read failed ({str(exc).splitlines()[0]})") from None

    def params(self) -> tuple[list[str], np.ndarray]:
        """Randomised dynamics parameters per episode (analysis only): column names and an (E, P) table."""
        columns = list(self.manifest.get("param_columns", []))
        tables = [self._file(i)["params"][()] for i in range(len(self._files))]
        return columns, np.concatenate(tables).reshape(-1, len(columns))

    def nbytes(self) -> int:
        total = 0
        for i in range(len(self._files)):
            handle = self._file(i)
            total += sum(handle[f].size * handle[f].dtype.itemsize for f in WINDOW_FIELDS + self.optional)
        return total

    def load(self, max_bytes: int = 2 << 30) -> ShardDataset | InMemoryEpisodes:
        """The whole dataset in memory when it fits in `max_bytes` (one read per field and shard), else self."""
        if self.nbytes() > max_bytes:
            return self
        episodes: list[dict[str, np.ndarray]] = []
        fields = list(WINDOW_FIELDS + self.optional)
        for i in range(len(self._files)):
            handle = self._file(i)
            try:
                data = {f: handle[f][()] for f in fields}
            except OSError as exc:
                raise DatasetError(f"{handle.filename}: read failed ({str(exc).splitlines()[0]})") from None
            offsets = handle["episode_offsets"][()]
            for j, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
                episode = {f: v[a:b] for f, v in data.items()}
                episode["episode"] = np.full(b - a, handle["episode_ids"][j], dtype=np.int64)
                episodes.append(episode)
        return InMemoryEpisodes(episodes)

    def close(self) -> None:
        for i, handle in enumerate(self._files):
            if handle is not None:
                handle.close()
                self._files[i] = None
