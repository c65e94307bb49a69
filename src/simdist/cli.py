"""`simdist <verb>`: the command line of the core. Each verb lives in the module that owns the concept."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Sequence

from simdist.errors import SimdistError

# verb -> (module, one-line help). A module provides `add_arguments(parser)` and `run(args) -> int`.
VERBS: dict[str, tuple[str, str]] = {
    "render": ("simdist.sim.render", "write a video or image strip of a rollout"),
    "bench": ("simdist.bench", "measure speed as ratios to a baseline measured in the same run"),
    "expert": ("simdist.experts.commands", "train or evaluate a task's privileged expert"),
    "data": ("simdist.data.commands", "generate the pretraining corpus"),
    "train": ("simdist.train.commands", "pretrain or evaluate the world model"),
    "deploy": ("simdist.runtime.deploy", "run the planner on a robot (default sim:PROFILE) and log a bag"),
    "emulate": (
        "simdist.robots.emulate",
        "a task's robot simulated behind its own hardware protocol (Go2: DDS)",
    ),
    "finetune": (
        "simdist.runtime.finetune",
        "finetune the dynamics on run bags; publish a validated version",
    ),
    "rollback": (
        "simdist.runtime.rollback",
        "point a model's dynamics/current back at an earlier, validated version",
    ),
    "ensemble": (
        "simdist.runtime.ensemble",
        "a world model with K dynamics members, the new ones trained on simulation runs",
    ),
    "adapt": ("simdist.runtime.adapt", "rounds of deploy, finetune, hot swap and evaluation on sim:PROFILE"),
    "experiment": (
        "simdist.experiment.run",
        "SimDist against baselines with the same real-data budget on sim:PROFILE",
    ),
    "calibrate": (
        "simdist.experiment.calibrate",
        "what a candidate real profile costs the zero-shot controller and the expert, against sim",
    ),
    "plan-grid": (
        "simdist.experiment.grid",
        "planner settings against dynamics versions, lockstep, on sim:PROFILE (planning strength vs model quality)",
    ),
    "plan-grid-read": (
        "simdist.experiment.grid_read",
        "plan-grid results over seeds: means and paired differences against a reference setting",
    ),
    "experiment-merge": (
        "simdist.experiment.merge",
        "one report from experiment runs made apart (seeds in parallel, the oracle on its own)",
    ),
}


class OneLineParser(argparse.ArgumentParser):
    """Argument errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="simdist", description="SimDist: simulation-pretrained world models, adapted on the robot."
    )
    sub = parser.add_subparsers(dest="verb", metavar="<verb>", parser_class=OneLineParser)
    sub.required = True
    for verb, (module_name, help_text) in VERBS.items():
        module = importlib.import_module(module_name)
        verb_parser = sub.add_parser(verb, help=help_text, description=help_text)
        module.add_arguments(verb_parser)
        verb_parser.set_defaults(_run=module.run)
    return parser


def add_task_arguments(parser: argparse.ArgumentParser, *, profile: bool = True) -> None:
    """The arguments every task-level verb shares: --task, --profile, --set."""
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    if profile:
        parser.add_argument(
            "--profile", default="sim", help="dynamics profile (sim, or a real-world emulation)"
        )
    add_overrides_argument(parser)


def add_overrides_argument(parser: argparse.ArgumentParser, help: str = "override any YAML value") -> None:
    """`--set KEY=VALUE` (repeatable) into `args.overrides`, parsed by simdist.config.parse_overrides."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def positive_float(text: str) -> float:
    """argparse type: a finite number above zero (a duration), else argparse's one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `simdist` command and return its exit status; never ends the calling process (tests and other
    programs call it). The `simdist` executable is `run`."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's one-line usage error (2), or --help (0)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args._run(args) or 0)
    except SimdistError as exc:
        sys.stderr.write(f"simdist: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("simdist: interrupted\n")
        return 130


def run() -> None:
    """The `simdist` executable: `main`, then the process ends with its status, at once where a driver thread is
    still blocked in native code (`leave_past_stuck_drivers`). Only a process's entry point may end it that way."""
    from simdist.hardware.robot import leave_past_stuck_drivers

    raise SystemExit(leave_past_stuck_drivers(main()))


if __name__ == "__main__":
    run()
