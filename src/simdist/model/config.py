"""Architecture sizes of the world model, loaded from config/model/<preset>.yaml."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from simdist.config import apply_overrides, build, load_named


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """Optional camera branch: a 64x64 RGB image through stride-2 convolutions."""

    channels: tuple[int, ...] = (8, 16, 32)
    size: int = 64


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes shared by every task; observation/action/command sizes come from the data."""

    latent_dim: int = 64
    encoder_hidden: tuple[int, ...] = (128, 128)
    history: int = 25
    horizon: int = 25
    mlp_ratio: int = 4
    dynamics_layers: int = 2
    dynamics_heads: int = 8
    dynamics_members: int = (
        1  # an ensemble of dynamics decoders on the shared encoder (disagreement-aware planning)
    )
    head_layers: int = 1
    head_heads: int = 4
    policy_layers: int = 4
    policy_heads: int = 8
    image: ImageConfig | None = None

    def __post_init__(self) -> None:
        from simdist.errors import ConfigError

        for name in ("dynamics_heads", "head_heads", "policy_heads"):
            if self.latent_dim % getattr(self, name):
                raise ConfigError(f"model.latent_dim {self.latent_dim} is not divisible by model.{name}")
        if self.dynamics_members < 1:
            raise ConfigError("model.dynamics_members must be at least 1")
        if self.history < 1 or self.horizon < 1:
            raise ConfigError("model.history and model.horizon must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return _lists(data)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def load_model_config(preset: str, overrides: Mapping[str, Any] | None = None) -> ModelConfig:
    """config/model/<preset>.yaml with dotted overrides (keys relative to the model section)."""
    data = load_named("model", preset)
    if overrides:
        data = apply_overrides(data, overrides, open_keys=("image",))
    return build(ModelConfig, data, "model")
