"""The finetuning options are declared once (FinetuneOptions): `simdist finetune` and `simdist adapt` generate
their flags from its fields, with its defaults, and build the options from what they parsed."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from simdist.runtime import adapt
from simdist.runtime import finetune as ft
from simdist.runtime import finetune_options as fo


def _parse(add_arguments, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


FRONTENDS = [
    (ft.add_arguments, ft.CLI_OPTIONS, ["--model", "m", "--bag", "b"]),
    (adapt.add_arguments, adapt.ADAPT_OPTIONS, ["--task", "t", "--profile", "p"]),
]


@pytest.mark.parametrize(("add_arguments", "names", "required"), FRONTENDS)
def test_no_flags_give_the_dataclass_defaults(add_arguments, names, required) -> None:
    assert fo.options_from_args(_parse(add_arguments, required), names) == fo.FinetuneOptions()


def test_every_finetune_flag_reaches_its_field() -> None:
    argv = ["--model", "m", "--bag", "b", "--sim-data", "sim", "--sim-share", "0.5", "--batch-size", "8"]
    argv += ["--lr", "1e-3", "--warmup-steps", "5", "--final-lr-fraction", "0.1", "--max-epochs", "3"]
    argv += ["--max-steps", "40"]
    argv += ["--max-minutes", "1.5", "--val-fraction", "0.1", "--eval-every", "7", "--patience", "2"]
    argv += ["--min-improvement", "0.01", "--seed", "4", "--threads", "1", "--trainable", "all"]
    options = fo.options_from_args(_parse(ft.add_arguments, argv), ft.CLI_OPTIONS)
    assert options == dataclasses.replace(
        fo.FinetuneOptions(),
        sim_data="sim",
        sim_share=0.5,
        batch_size=8,
        lr=1e-3,
        warmup_steps=5,
        final_lr_fraction=0.1,
        max_epochs=3,
        max_steps=40,
        max_minutes=1.5,
        val_fraction=0.1,
        eval_every=7,
        patience=2,
        min_improvement=0.01,
        seed=4,
        threads=1,
        trainable="all",
    )


def test_max_minutes_zero_is_no_budget() -> None:
    args = _parse(adapt.add_arguments, ["--task", "t", "--profile", "p", "--max-minutes", "0"])
    assert fo.options_from_args(args, adapt.ADAPT_OPTIONS).max_minutes is None


def test_a_round_trains_the_measured_4000_steps_unless_told_otherwise() -> None:
    """Every adaptation result was measured with 4 000 steps a round; longer training planned worse on the slope."""
    default = fo.options_from_args(
        _parse(adapt.add_arguments, ["--task", "t", "--profile", "p"]), adapt.ADAPT_OPTIONS
    )
    assert default.max_steps == 4000
    # 0: no cap, as many steps as --max-epochs allows
    args = _parse(adapt.add_arguments, ["--task", "t", "--profile", "p", "--max-steps", "0"])
    assert fo.options_from_args(args, adapt.ADAPT_OPTIONS).max_steps is None
    from simdist.errors import ConfigError

    args = _parse(adapt.add_arguments, ["--task", "t", "--profile", "p", "--max-steps", "-5"])
    with pytest.raises(ConfigError, match="max_steps must be >= 1"):
        fo.options_from_args(args, adapt.ADAPT_OPTIONS)


def test_a_final_rate_outside_zero_to_one_is_refused_in_one_line() -> None:
    from simdist.errors import ConfigError

    for bad in ("-0.1", "1.5"):
        args = _parse(adapt.add_arguments, ["--task", "t", "--profile", "p", "--final-lr-fraction", bad])
        with pytest.raises(ConfigError, match=r"^final_lr_fraction must be in \[0, 1\], got "):
            fo.options_from_args(args, adapt.ADAPT_OPTIONS)


def test_only_declared_options_become_flags() -> None:
    with pytest.raises(ValueError, match="eval_windows"):
        fo.add_option_arguments(argparse.ArgumentParser(), ["eval_windows"])


def test_start_from_reaches_its_field_and_a_bad_one_is_refused_when_the_options_are_made() -> None:
    from simdist.errors import ConfigError

    argv = ["--task", "t", "--profile", "p", "--start-from", "pretrained"]
    assert (
        fo.options_from_args(_parse(adapt.add_arguments, argv), adapt.ADAPT_OPTIONS).start_from
        == "pretrained"
    )
    argv[-1] = "v0000"
    with pytest.raises(ConfigError, match="start_from must be"):  # adapt: before any robot minute is spent
        fo.options_from_args(_parse(adapt.add_arguments, argv), adapt.ADAPT_OPTIONS)
    with pytest.raises(ConfigError, match="dynamics finetuning"):
        fo.FinetuneOptions(start_from="pretrained", trainable="all")
