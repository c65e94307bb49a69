"""Running mean/variance per field (Chan's parallel update), mergeable across shards and processes."""

from __future__ import annotations

from typing import Any

import numpy as np


class RunningStats:
    """Count, mean and sum of squared deviations in float64, so shards can be merged exactly enough."""

    def __init__(self, dim: int | None = None) -> None:
        self.count = 0
        self.mean = np.zeros(dim or 0, dtype=np.float64) if dim is not None else None
        self.m2 = np.zeros_like(self.mean) if self.mean is not None else None

    def update(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64)
        values = values.reshape(values.shape[0], -1)
        n = values.shape[0]
        if n == 0:
            return
        mean = values.mean(axis=0)
        m2 = ((values - mean) ** 2).sum(axis=0)
        self._merge(n, mean, m2)

    def _merge(self, n: int, mean: np.ndarray, m2: np.ndarray) -> None:
        if self.count == 0 or self.mean is None or self.m2 is None:
            self.count, self.mean, self.m2 = n, mean.copy(), m2.copy()
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.count = total

    def merge(self, other: RunningStats) -> None:
        if other.count and other.mean is not None and other.m2 is not None:
            self._merge(other.count, other.mean, other.m2)

    @property
    def std(self) -> np.ndarray:
        assert self.m2 is not None
        return np.sqrt(self.m2 / max(self.count, 1))

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "mean": _list(self.mean), "m2": _list(self.m2)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunningStats:
        stats = cls()
        stats.count = int(data["count"])
        stats.mean = np.asarray(data["mean"], dtype=np.float64)
        stats.m2 = np.asarray(data["m2"], dtype=np.float64)
        return stats


def _list(array: np.ndarray | None) -> list[float]:
    return [] if array is None else [float(x) for x in array]
