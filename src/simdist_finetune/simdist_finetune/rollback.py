"""`ros2 run simdist_finetune rollback --model-dir DIR [--to v0003]`: `simdist rollback` (validate, then move
`dynamics/current` back), then announce the version on /simdist/model_version and wait for the running planner
to confirm it plans with it. A version that fails validation is refused: one line, exit 2, nothing changed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from simdist.errors import SimdistError
from simdist.runtime.realtime import yield_to_control
from simdist.runtime.rollback import parse_version, rollback_model
from simdist.runtime.store import version_label
from simdist_finetune.finetune_dynamics import Announcer, strip_ros_args


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollback", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="the planner's checkpoint folder")
    parser.add_argument(
        "--to", default=None, help="version (v0003); default: the newest older than the current"
    )
    parser.add_argument(
        "--wait", type=float, default=10.0, help="seconds to wait for the planner's confirmation"
    )
    args = parser.parse_args(strip_ros_args(sys.argv[1:] if argv is None else argv))
    yield_to_control()  # beside a running planner
    try:
        announcer: Announcer | None = Announcer()
    except ImportError:
        announcer = None
    try:
        try:
            before, after = rollback_model(args.model_dir, parse_version(args.to))
        except SimdistError as exc:
            sys.stderr.write(f"rollback: error: {exc}\n")
            return exc.exit_code
        print(
            f"{args.model_dir}: dynamics/current {version_label(before)} -> {version_label(after)}",
            flush=True,
        )
        if announcer is not None:
            print(announcer.announce(args.model_dir, after, args.wait), flush=True)
        return 0
    finally:
        if announcer is not None:
            announcer.close()


if __name__ == "__main__":
    raise SystemExit(main())
