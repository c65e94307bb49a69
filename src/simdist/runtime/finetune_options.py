"""`FinetuneOptions`: every finetuning setting, its default and its help declared once; the command lines
(`simdist finetune`, `simdist adapt`, the ROS `finetune_dynamics`) generate their flags from these fields."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from simdist.errors import ConfigError
from simdist.sim.config import START_FROM

# trainable kinds that train heads beside the dynamics, on what the robot measured (outside the paper's recipe)
HEADS_BESIDE_DYNAMICS = {"dynamics_reward": ("reward",), "dynamics_critic": ("reward", "value")}


def _option(default: Any, help: str | None = None) -> Any:
    """A `FinetuneOptions` field; one with `help` is also a command-line option (`add_option_arguments`)."""
    return dataclasses.field(default=default, metadata={"help": help} if help else {})


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
    """Defaults from the paper's real-world adaptation (batch 32, lr 2e-4 after a warm-up, 95/5 split).

    The one place each option's default and help are given: `simdist finetune`, `simdist adapt` and the ROS
    `finetune_dynamics` node generate their flags from these fields (`add_option_arguments`).
    """

    batch_size: int = _option(32, "windows per batch")
    lr: float = _option(2e-4, "learning rate after the warm-up")
    # at most a quarter of the planned steps, so that a small run still trains
    warmup_steps: int = _option(2000, "learning-rate warm-up steps")
    # After the warm-up the paper's rate stays constant (1.0). Below 1, a cosine decay from `lr` to this share of it
    # at the last planned step, so the run ends on a quieter iterate.
    final_lr_fraction: float = _option(
        1.0,
        "learning rate at the last planned step as a share of --lr, cosine after the warm-up (1: constant)",
    )
    max_epochs: int = _option(100, "passes over the real data at most")
    # Every adaptation result in docs/results.md trained its rounds for 4 000 steps. Trained on to early stopping
    # (16 000 steps, held-out latent error a third lower) the slope's dynamics planned a slower, more cautious walk:
    # -0.36 m at 30 minutes (6.7 SE), -0.12 m at 15 (1.5 SE; docs/results.md 2026-12-06). A lower held-out error on
    # the windows the robot visited is not a better model where the search goes.
    max_steps: int | None = _option(4000, "optimiser steps at most (0: as many as --max-epochs allows)")
    # Wall-clock ceiling for a slow machine. The paper's 100 epochs of 15 minutes of data take ~75 min on a 2-core CPU;
    # the 4 000 steps take 1.5-2 min at one thread here (50 steps/s for the dynamics alone), so 4 minutes rarely binds.
    # It counts the optimiser's time only and is checked at each evaluation (at least `eval_every` steps train).
    max_minutes: float | None = _option(
        4.0, "wall-clock training budget in minutes, checked at each held-out evaluation (0: none)"
    )
    val_fraction: float = _option(0.05, "share of the real episodes held out (early stopping and the gate)")
    eval_every: int = _option(250, "steps between held-out evaluations (early stopping)")
    eval_windows: int = 2048
    patience: int = _option(6, "evaluations without improvement before stopping")
    grad_clip: float = 1.0
    min_improvement: float = _option(
        0.0, "the gate: relative held-out improvement a version needs to be published"
    )
    sim_data: str | None = _option(None, "simulation dataset folder to mix in")
    sim_share: float = _option(0.2, "share of each batch from --sim-data, when one is given")
    seed: int = _option(0, "random seed")
    threads: int = _option(
        0, "torch threads (0: torch's choice; 1 beside a running robot, so control is not contended)"
    )
    # Where each finetune starts: the dynamics version in force, or the pretrained v0000, so that each adapt round
    # trains afresh on all the data so far (on the slope, continuing from the 15-minute dynamics took back part of
    # their gain; on the peg, training afresh lost: docs/results.md). "task": the model's task's measured choice
    # (its `finetune_start_from`; full finetuning always continues). The gate compares with the version in force.
    start_from: str = _option(
        "task",
        "dynamics to train from: current (the version in force), pretrained (v0000, or an ensemble's trained "
        "members: each round afresh on all the data so far; the gate still compares with the version in force) or "
        "task (the task's measured choice, config/tasks/<task>.yaml finetune_start_from)",
    )
    # "dynamics" (SimDist: every dynamics member), "dynamics_reward" (outside the paper's recipe: the dynamics on
    # the paper's latent loss, and the reward head on the rewards the robot measured, read from the predicted latents
    # with those detached, at `reward_weight`; encoder, value and policy stay bit-identical), "dynamics_critic"
    # (the same, and the value head on the returns the robot earned, `real_data.measured_returns`), "all" (the
    # full-finetuning baseline), or "new_members" (an ensemble's members 1..K-1 only, re-initialised when training
    # starts, member 0 kept: how `simdist ensemble` trains its new members)
    trainable: str = _option(
        "dynamics",
        "what trains: dynamics (SimDist: every dynamics member), dynamics_reward (the dynamics on the latent loss "
        "and the reward head on the rewards the robot measured; a model of its own to --out), dynamics_critic "
        "(the same, and the value head on the returns it earned), all (the "
        "full-finetuning baseline; a model of its own to --out), new_members (an ensemble's members 1..K-1, from "
        "a fresh start)",
    )
    # Dynamics-only finetuning: the rewards the robot measured (`/simdist/reward`) as a second target, read by the
    # frozen reward head from the predicted latents, so only the dynamics learns from them; early stopping and the
    # gate then compare latent error + this weight x reward error (+ the value's, below). 0 is the paper's recipe.
    dynamics_reward_weight: float = _option(
        0.0,
        "dynamics finetuning: weight of the reward the robot measured, read by the frozen reward head from the "
        "predicted latents (0: the latent loss alone, the paper's recipe)",
    )
    # The same for the value head: the discounted return the robot earned from each step on
    # (`real_data.measured_returns`, at `discount`, the critic's), read by the frozen value head.
    dynamics_value_weight: float = _option(
        0.0,
        "dynamics finetuning: weight of the return the robot earned (from the measured rewards), read by the "
        "frozen value head from the predicted latents (0: the paper's recipe)",
    )
    discount: float = 0.99
    # Full finetuning only (trainable="all"), so that the forgetting baseline is the strongest reasonable one:
    # latent targets from an exponential moving average of the encoder (not the encoder being trained), the rewards
    # the robot measured (bags of a robot that reports them: `/simdist/reward`), and the starting model's value and
    # policy outputs (and its reward where none was measured) on the same real windows as anchors.
    # `reward_weight` also weighs each head's loss where heads train beside the dynamics (`trained_heads`).
    target_ema: float = 0.99
    anchor_weight: float = 1.0
    reward_weight: float = 1.0
    # Heads beside the dynamics only (`trained_heads`): held to the starting heads' outputs off the robot's data, on
    # chunks the planner would also score (each window's actions plus Gaussian noise of this std, raw action units;
    # their latents predicted by the dynamics, detached), at `anchor_weight`. Where the robot went its measurements
    # teach the heads; where it did not the simulation's heads keep their say. 0: no anchor. Measured on foam at 1.0
    # (2026-12-06): still far below zero-shot (1.99 m with the reward head, 1.04 m with both, against 2.63 m): the
    # pretrained heads are optimistic there, so holding to them off the data favours chunks the robot never ran.
    head_anchor_std: float = _option(
        0.0,
        "heads beside the dynamics: hold them to the starting heads on the windows' actions plus Gaussian noise of "
        "this std (raw action units), where the robot measured nothing (0: no anchor)",
    )

    @property
    def trained_heads(self) -> tuple[str, ...]:
        """The heads that train beside the dynamics on what the robot measured ("reward", "value")."""
        return HEADS_BESIDE_DYNAMICS.get(self.trainable, ())

    @property
    def own_model(self) -> bool:
        """Whether this finetune writes a model of its own: it trains weights every dynamics version of the source
        shares (full finetuning, or heads beside the dynamics), so it never publishes there."""
        return self.trainable == "all" or bool(self.trained_heads)

    def __post_init__(self) -> None:  # checked where the options are made, before a robot collects any data
        if not 0.0 <= self.final_lr_fraction <= 1.0:
            raise ConfigError(f"final_lr_fraction must be in [0, 1], got {self.final_lr_fraction}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1 (0 on the command line: no cap), got {self.max_steps}")
        if self.start_from not in ("task", *START_FROM):
            raise ConfigError(
                f"start_from must be one of task, {', '.join(START_FROM)}; got '{self.start_from}'"
            )
        if self.trained_heads and (self.dynamics_reward_weight or self.dynamics_value_weight):
            raise ConfigError(
                f"trainable '{self.trainable}' trains the heads themselves: dynamics reward and value weights "
                "(read by frozen heads) are for trainable 'dynamics' only"
            )
        if self.head_anchor_std < 0 or (self.head_anchor_std > 0 and not self.trained_heads):
            raise ConfigError(
                f"head_anchor_std must be >= 0 and is for trainable {' or '.join(HEADS_BESIDE_DYNAMICS)} only "
                f"(got {self.head_anchor_std} with '{self.trainable}')"
            )
        if self.start_from == "pretrained" and self.trainable != "dynamics":
            raise ConfigError(
                "start_from 'pretrained' is for dynamics finetuning (trainable 'dynamics') only"
            )


def add_option_arguments(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """`--name-with-dashes` for each named `FinetuneOptions` field, its type, default and help from the dataclass."""
    hints = typing.get_type_hints(FinetuneOptions)
    fields = {f.name: f for f in dataclasses.fields(FinetuneOptions)}
    for name in names:
        field = fields[name]
        if "help" not in field.metadata:
            raise ValueError(f"FinetuneOptions.{name} is not a command-line option")
        kind = next(t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None))
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=kind, default=field.default, help=field.metadata["help"]
        )


def options_from_args(args: argparse.Namespace, names: Sequence[str]) -> FinetuneOptions:
    """The options `add_option_arguments(parser, names)` parsed (--max-minutes 0: no budget, --max-steps 0: no step
    cap); the rest default."""
    values = {name: getattr(args, name) for name in names}
    for name in ("max_minutes", "max_steps"):
        if name in values:
            values[name] = values[name] or None
    return FinetuneOptions(**values)
