"""z-score statistics as buffers, so the world model takes and returns raw units."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

# model-side name -> dataset field
FIELDS = {"obs": "proprio", "action": "action", "command": "command", "reward": "reward", "value": "value"}
MIN_STD = 1e-6


class Normalizer(nn.Module):
    """`normalize(kind, x)` and `denormalize(kind, x)` for kind in obs, action, command, reward, value."""

    def __init__(self, obs_dim: int, act_dim: int, cmd_dim: int) -> None:
        super().__init__()
        dims = {"obs": obs_dim, "action": act_dim, "command": cmd_dim, "reward": 1, "value": 1}
        for kind, dim in dims.items():
            self.register_buffer(f"{kind}_mean", torch.zeros(dim))
            self.register_buffer(f"{kind}_std", torch.ones(dim))

    def normalize(self, kind: str, x: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(kind, x)
        return (x - mean) / std

    def denormalize(self, kind: str, x: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(kind, x)
        return x * std + mean

    def _stats(self, kind: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std = getattr(self, f"{kind}_mean"), getattr(self, f"{kind}_std")
        if kind in ("reward", "value"):  # scalars per step: (..., ) not (..., 1)
            return mean[0], std[0]
        return mean, std

    @torch.no_grad()
    def load_stats(self, stats: Mapping[str, Mapping[str, Any]]) -> None:
        """Statistics in the dataset manifest's format: {field: {mean: [...], std: [...]}}; tiny stds become 1."""
        for kind, field in FIELDS.items():
            if field not in stats:
                continue
            mean = torch.as_tensor(stats[field]["mean"], dtype=torch.float32).reshape(-1)
            std = torch.as_tensor(stats[field]["std"], dtype=torch.float32).reshape(-1)
            buf_mean = getattr(self, f"{kind}_mean")
            if mean.shape != buf_mean.shape or std.shape != buf_mean.shape:
                from simdist.errors import CheckpointError

                raise CheckpointError(
                    f"normaliser '{field}' has {mean.numel()} values, expected {buf_mean.numel()}"
                )
            buf_mean.copy_(mean)
            getattr(self, f"{kind}_std").copy_(torch.where(std < MIN_STD, torch.ones_like(std), std))

    def stats(self) -> dict[str, dict[str, list[float]]]:
        """The buffers in the manifest's format (the std floor already applied)."""
        return {
            field: {
                "mean": [float(x) for x in getattr(self, f"{kind}_mean")],
                "std": [float(x) for x in getattr(self, f"{kind}_std")],
            }
            for kind, field in FIELDS.items()
        }
