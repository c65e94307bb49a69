"""Pretraining settings from config/train/<preset>.yaml; the model sizes come from config/model/<preset>.yaml."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from simdist.config import apply_overrides, build, config_hash, load_named
from simdist.errors import ConfigError
from simdist.model.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class LossWeights:
    dynamics: float = 1.0
    reward: float = 1.0
    value: float = 1.0
    action: float = 4.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int  # global, over all processes
    lr: float  # peak, after warm-up
    final_lr: float  # end of the cosine decay
    warmup_steps: int
    grad_clip: float
    weights: LossWeights = LossWeights()
    weight_decay: float = 0.0
    seed: int = 0
    val_fraction: float = 0.05
    log_every: int = 50
    eval_every: int = 1000
    eval_windows: int = 2048
    save_every: int = 1000
    memory_mb: int = 2048  # datasets up to this size are sampled from memory, larger ones from the shards
    # behaviour cloning's target: "executed" (the actions along clean expert chunks: the paper's recipe) or "expert"
    # (the final expert's action at every step the corpus recorded it for: DAgger's labels)
    behaviour_cloning: str = "executed"

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ConfigError("train.steps and train.batch_size must be at least 1")
        if self.behaviour_cloning not in ("executed", "expert"):
            raise ConfigError(
                f"train.behaviour_cloning must be 'executed' or 'expert', not {self.behaviour_cloning!r}"
            )
        if self.lr <= 0 or self.final_lr < 0:
            raise ConfigError("train.lr must be positive and train.final_lr non-negative")


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything a pretraining run is configured by (its hash guards --resume)."""

    train: TrainConfig
    model: ModelConfig

    def hash(self) -> str:
        """Hash of what a resumed run must share; `steps` and the logging cadence may change (to extend a run)."""
        train = dataclasses.asdict(self.train)
        for key in ("steps", "log_every", "eval_every", "eval_windows", "save_every"):
            train.pop(key)
        if train["behaviour_cloning"] == "executed":  # the recipe before the option existed: same hash
            train.pop("behaviour_cloning")
        return config_hash({"train": train, "model": self.model.to_dict()})


def load_setup(preset: str, overrides: Mapping[str, Any] | None = None) -> Setup:
    """config/train/<preset>.yaml and config/model/<preset>.yaml; overrides are `train.x=..` or `model.x=..`."""
    data = {"train": load_named("train", preset), "model": load_named("model", preset)}
    if overrides:
        data = apply_overrides(data, overrides, open_keys=("model.image",))
    return build(Setup, data)
