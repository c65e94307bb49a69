"""The oracle: the same SimDist pipeline, with the real profile inside the pretraining randomisation.

Each parameter the profile sets has its randomisation range widened to include the profile's value (a parameter
the randomisation does not draw gets the range [nominal, profile value]); the corpus is regenerated with the same
expert and the world model pretrained again. Only data generation and pretraining see the widened ranges.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simdist.sim.config import TaskConfig, load_task


def oracle_randomisation(cfg: TaskConfig, profile: str) -> dict[str, list[float]]:
    """`--set` overrides {'randomisation.<param>': [lo, hi]} that put `profile` inside the randomisation."""
    cfg.profile(profile)  # unknown profile: one clear error
    out: dict[str, list[float]] = {}
    for name, value in cfg.profiles[profile].items():
        lo, hi = cfg.randomisation.get(name, [cfg.nominal[name], cfg.nominal[name]])
        low, high = min(lo, value), max(hi, value)
        if name == "latency_steps":  # drawn as an integer
            low, high = int(low), int(high)
        if [low, high] != [lo, hi] or name not in cfg.randomisation:
            out[f"randomisation.{name}"] = [low, high]
    return out


def check_oracle(model: Path, cfg: TaskConfig, profile: str, log: Any = print) -> None:
    """Refuse a reused oracle checkpoint whose corpus was not drawn from the task's randomisation widened to hold
    `profile` (every randomised parameter, not only the widened ones).

    Checkpoints pretrained before the corpus's randomisation was recorded (2026-12-07) cannot be checked: said in
    the log, and reusing one stays the user's statement."""
    from simdist.errors import ConfigError
    from simdist.model.checkpoint import read_description

    recorded = read_description(model).get("extra", {}).get("randomisation")
    required = {name: list(span) for name, span in cfg.randomisation.items()}
    required.update(
        {k.removeprefix("randomisation."): v for k, v in oracle_randomisation(cfg, profile).items()}
    )
    if recorded is None:
        log(f"oracle: {model} does not record its corpus's randomisation; not checked against {required}")
        return
    short = []
    for name, (low, high) in required.items():
        if name not in recorded:  # drawn at its nominal value: covers only that value
            if not low == high == cfg.nominal.get(name):
                short.append(f"{name} fixed does not cover [{low}, {high}]")
            continue
        lo, hi = recorded[name]
        if lo > low or hi < high:
            short.append(f"{name} [{lo}, {hi}] does not cover [{low}, {high}]")
    if short:
        raise ConfigError(f"--oracle-model {model}: its corpus's randomisation {'; '.join(short)}")


def pretrain_pipeline(
    task: str,
    expert: Path,
    out: Path,
    *,
    data_preset: str,
    train_preset: str,
    overrides: Mapping[str, Any] | None = None,
    data_overrides: Mapping[str, Any] | None = None,
    train_overrides: Mapping[str, Any] | None = None,
) -> Path:
    """Generate a corpus in `out/data` and pretrain a world model into `out/model` (returned).

    `train_overrides` are `simdist train pretrain --set` keys (`train.steps`, `model.latent_dim`, ...). Resumes: a
    finished model is reused; the corpus generator itself resumes at its first missing shard.
    """
    from simdist.data.generate import generate, load_data_config
    from simdist.model.checkpoint import CONFIG_NAME
    from simdist.train.pretrain import pretrain

    model = out / "model"
    if (model / CONFIG_NAME).is_file():
        return model
    cfg = load_task(task, overrides)
    dcfg = load_data_config(data_preset, dict(data_overrides or {}))
    generate(cfg, dcfg, expert, out / "data", data_preset)
    args = argparse.Namespace(
        task=task,
        data=out / "data",
        preset=train_preset,
        out=model,
        device="cpu",
        resume=False,
        partial=False,
        no_progress=True,
        overrides=[f"{k}={json.dumps(v)}" for k, v in dict(train_overrides or {}).items()],
    )
    pretrain(args)
    return model
