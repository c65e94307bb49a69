"""`simdist deploy`: run the planner on a robot (default: the embedded `sim:<profile>`) and log the run as a bag.

Robots: `sim:PROFILE` (SimRobot; lockstep unless --realtime), or the task's robot's hardware by its address:
`ur5e:HOST` (RTDE, servoL), `go2:IFACE[:DOMAIN]` (unitree_sdk2py, joint targets through the safety filter);
hardware always runs in real time.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simdist import robots
from simdist.bags.writer import BagWriter, next_run_dir
from simdist.cli import add_overrides_argument, positive_float
from simdist.errors import CheckpointError, ConfigError
from simdist.plan.config import load_planner_configs, task_action_limits
from simdist.runtime.actuation import Actuator, SimActuator
from simdist.runtime.ingest import CameraIngest
from simdist.runtime.loop import DeployLoop
from simdist.runtime.loop_stats import LoopStats
from simdist.runtime.realtime import Scheduling, parse_cpus
from simdist.runtime.store import ModelStore
from simdist.sim.config import TaskConfig, load_task, task_config

log = logging.getLogger(__name__)
SAFE_STOP_AFTER_S = 1.0  # hardware: a hold this long (no usable plan) becomes a safe stop (damping on a Go2)


@dataclass
class DeployResult:
    stats: LoopStats
    bag: Path | None
    interrupted: bool
    version: str  # the model version in use at the end
    scheduling_problems: list[str] = field(default_factory=list)  # what of the requested scheduling failed


def make_robot(
    spec: str,
    cfg: TaskConfig,
    *,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    realtime: bool = False,
    commands: Sequence[Sequence[float]] | None = None,
) -> Any:
    """A robot from `sim:PROFILE`, `ur5e:HOST` or `go2:IFACE[:DOMAIN]`."""
    kind, _, rest = spec.partition(":")
    if kind == "sim":
        from simdist.hardware.sim_robot import SimRobot

        return SimRobot(
            cfg, rest or "sim", seed=seed, overrides=overrides, commands=commands, realtime=realtime
        )
    robot = robots.get(cfg.robot)
    if kind != cfg.robot:
        raise ConfigError(
            f"robot '{spec}' does not fit task {cfg.task} (a {cfg.robot} task; valid: sim:PROFILE, "
            f"{cfg.robot}:{robot.address or '...'})"
        )
    return robot.connect(rest, cfg)


def default_command(cfg: TaskConfig) -> np.ndarray:
    """The command a hardware run gets without --command (the robot's: the middle evaluation speed, the nominal
    hole pose)."""
    return robots.get(cfg.robot).default_command(cfg)


def make_actuator(
    robot: Any, cfg: TaskConfig, command: Callable[[], np.ndarray], *, safety: bool
) -> Actuator:
    """The simulator takes task actions directly; hardware (or `safety`) goes through the robot's own actuator."""
    if hasattr(robot, "send_action") and not safety:
        return SimActuator(robot)
    return robots.get(cfg.robot).actuator(robot, cfg, command)


def run_deploy(
    task: str | TaskConfig,
    robot_spec: str,
    model: str | Path | ModelStore,
    *,
    ticks: int | None = None,
    seconds: float | None = None,
    realtime: bool = False,
    bag_dir: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    planner: str = "cpu",
    planner_overrides: Mapping[str, Any] | None = None,
    adapted_planner: bool = True,
    seed: int = 0,
    command: Sequence[float] | None = None,
    commands: Sequence[Sequence[float]] | None = None,
    camera: str | None = None,
    safety: bool = False,
    stop: threading.Event | None = None,
    on_tick: Callable[[int, DeployLoop], None] | None = None,
    robot: Any = None,
    scheduling: Scheduling | None = None,
    safe_stop_after_s: float | None = None,
) -> DeployResult:
    """Deploy for `ticks` ticks or `seconds` of robot time; log into the next run_NN of `bag_dir` (if given).

    `task` is a task name or the command's TaskConfig (then `overrides` are taken as applied to it already).

    `model` is a checkpoint folder or a running ModelStore (kept across runs, as `simdist adapt` does).
    `adapted_planner`: once dynamics trained on real data are in force (`ModelStore.adapted`), plan with the search
    the planner file grants adapted dynamics (its `adapted` settings; `planner_overrides` still apply last). False:
    `planner` as loaded throughout (a measurement of one setting, `simdist plan-grid`).
    `scheduling`: real-time priority, CPUs and memory locking of the control and planner threads (real time only).
    `safe_stop_after_s`: a hold this long becomes a safe stop and ends the run (default: `SAFE_STOP_AFTER_S` on
    hardware, never in simulation).
    """
    cfg = task_config(task, overrides)
    hardware = not robot_spec.startswith("sim")
    realtime = realtime or hardware
    store = model if isinstance(model, ModelStore) else ModelStore(model)
    own_store = not isinstance(model, ModelStore)
    if store.model.obs_dim != _proprio_dim(cfg.robot):
        raise CheckpointError(
            f"{store.folder}: the model takes {store.model.obs_dim} observations, a {cfg.robot} measures "
            f"{_proprio_dim(cfg.robot)} (a model for another robot?)"
        )
    # what can be refused is refused before a robot is connected (a UR5e's control script is uploaded on connect)
    planner_cfg, adapted_cfg = load_planner_configs(
        planner, cfg.robot, {**dict(planner_overrides or {}), "horizon": store.model.horizon}, task=cfg.task
    )
    limits = task_action_limits(cfg)
    fixed = np.asarray(command if command is not None else default_command(cfg), dtype=np.float32)
    if robot is None:
        robot = make_robot(
            robot_spec, cfg, seed=seed, overrides=overrides, realtime=realtime, commands=commands
        )
    command_fn: Callable[[], np.ndarray] = (
        robot.command if hasattr(robot, "command") and command is None else fixed.copy
    )
    bag: BagWriter | None = None
    interrupted = False
    # Whatever fails or is interrupted from here on, the robot is stopped last, after every other thing was closed
    # (each close runs even if one before it raised).
    with contextlib.ExitStack() as closing:
        closing.callback(robot.stop)
        if own_store:
            closing.callback(store.stop)
        camera_ingest = _camera(camera, robot, cfg)
        if camera_ingest is not None:
            closing.callback(camera_ingest.close)
        if own_store:
            store.start()
        if bag_dir is not None:
            bag = BagWriter(
                next_run_dir(bag_dir),
                robot=cfg.robot,
                joint_names=robot.joint_names,
                camera=camera_ingest is not None,
                reward=bool(getattr(robot, "reports_reward", False)),
                info={
                    "task": cfg.task,
                    "robot_spec": robot_spec,
                    "control_hz": cfg.control_hz,
                    "model": str(store.folder),
                    "realtime": realtime,
                },
            ).open()
            closing.callback(lambda run=bag: run.close(reason="KeyboardInterrupt" if interrupted else None))
        loop = DeployLoop(
            robot=robot,
            robot_kind=cfg.robot,
            actuator=make_actuator(robot, cfg, command_fn, safety=safety or hardware),
            store=store,
            planner_config=planner_cfg,
            adapted_planner_config=adapted_cfg if adapted_planner else None,
            limits=limits,
            command=command_fn,
            control_hz=cfg.control_hz,
            bag=bag,
            camera=camera_ingest,
            realtime=realtime,
            episode_steps=cfg.episode_steps if hardware else None,
            seed=seed,
            on_tick=on_tick,
            scheduling=scheduling,
            safe_stop_after_s=safe_stop_after_s
            if safe_stop_after_s is not None
            else (SAFE_STOP_AFTER_S if hardware else None),
        )
        try:
            stats = loop.run(ticks=ticks, seconds=seconds, stop=stop)
        except KeyboardInterrupt:
            interrupted = True
            stats = loop.stats
    return DeployResult(
        stats=stats,
        bag=bag.path if bag else None,
        interrupted=interrupted,
        version=store.label,
        scheduling_problems=list(loop.scheduling_problems),
    )


def _proprio_dim(robot: str) -> int:
    return robots.get(robot).proprio_dim


def _camera(spec: str | None, robot: Any, cfg: TaskConfig) -> CameraIngest | None:
    if spec is None:
        return None
    if spec == "sim":
        if not hasattr(robot, "image"):
            raise ConfigError("--camera sim needs a sim robot")
        if not cfg.camera.enabled:
            raise ConfigError("--camera sim needs the task camera: add --set camera.enabled=true")
        return CameraIngest(robot.image, width=cfg.camera.width, height=cfg.camera.height)
    source: int | str = int(spec) if spec.isdigit() else spec
    return CameraIngest(source, width=cfg.camera.width, height=cfg.camera.height)


# -- CLI ---------------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument(
        "--robot", default="sim:sim", help="sim:PROFILE (default sim:sim), ur5e:HOST or go2:IFACE[:DOMAIN]"
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="checkpoint folder (default: models/<task>/)"
    )
    parser.add_argument(
        "--realtime", action="store_true", help="wall-clock control rate (sim robots run lockstep without it)"
    )
    parser.add_argument(
        "--rt-priority",
        type=int,
        default=None,
        metavar="N",
        help="real time: run the control thread under SCHED_FIFO at N (the planner at N-1; needs CAP_SYS_NICE)",
    )
    parser.add_argument(
        "--cpus", default=None, help="real time: pin the control and planner threads, e.g. 1 or 2-3"
    )
    parser.add_argument(
        "--lock-memory", action="store_true", help="real time: mlockall, no page faults during a tick"
    )
    parser.add_argument("--minutes", type=positive_float, default=1.0, help="robot time to run (default 1)")
    parser.add_argument(
        "--bag-dir",
        type=Path,
        default=Path("runs/bags"),
        help="write the run as run_NN here (default runs/bags)",
    )
    parser.add_argument("--no-bag", action="store_true", help="log nothing")
    parser.add_argument("--planner", default="cpu", help="config/planner/<name>.yaml (default cpu)")
    parser.add_argument(
        "--planner-set", dest="planner_overrides", action="append", default=[], metavar="KEY=VALUE"
    )
    parser.add_argument("--camera", default=None, help="log a camera: 'sim', a device index or a URL")
    parser.add_argument(
        "--command", type=float, nargs="+", default=None, help="fixed task command (hardware)"
    )
    parser.add_argument(
        "--safety",
        action="store_true",
        help="sim robots too: through the robot's own actuator (the Go2's safety filter, the UR5e's press guard)",
    )
    parser.add_argument("--seed", type=int, default=0)
    add_overrides_argument(parser, help="override any task YAML value (e.g. profiles.ptfe.friction=0.07)")


def resolve_model(task: str, model: Path | None) -> Path:
    """--model, else models/<task>/; a clear one-line error when there is no checkpoint."""
    from simdist.model.checkpoint import CONFIG_NAME
    from simdist.paths import models_dir

    folder = Path(model) if model is not None else models_dir() / task
    if not (folder / CONFIG_NAME).is_file():
        hint = "" if model is not None else " (pass --model DIR, or train one with `simdist train pretrain`)"
        raise CheckpointError(f"no world model for {task} at {folder}{hint}")
    return folder


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from simdist.config import parse_overrides

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    overrides = parse_overrides(args.overrides)
    cfg = load_task(
        args.task, overrides
    )  # an unknown task or key: its own one-line error, before the model's
    folder = resolve_model(args.task, args.model)
    console = Console(stderr=True)
    mode = "real time" if args.realtime or not args.robot.startswith("sim") else "lockstep"
    scheduling = Scheduling(
        priority=args.rt_priority, cpus=parse_cpus(args.cpus), lock_memory=args.lock_memory
    )
    if scheduling.requested and mode == "lockstep":
        raise ConfigError("--rt-priority, --cpus and --lock-memory are for real time: add --realtime")
    console.print(
        f"deploying {args.task} on {args.robot} ({mode}) with {folder} for {args.minutes:g} min of robot time"
    )
    result = run_deploy(
        cfg,
        args.robot,
        folder,
        seconds=args.minutes * 60.0,
        realtime=args.realtime,
        bag_dir=None if args.no_bag else args.bag_dir,
        overrides=overrides,
        planner=args.planner,
        planner_overrides=parse_overrides(args.planner_overrides),
        seed=args.seed,
        command=args.command,
        camera=args.camera,
        safety=args.safety,
        scheduling=scheduling,
    )
    s = result.stats.summary()
    print(
        f"ticks {s['ticks']}: fresh {s['fresh']}, late {s['late']} (ran the last plan's next step), held {s['held']}, "
        f"missed {s['missed']}, stale {s['stale']}, safe stops {s['safe_stops']}; errors {s['errors']}, "
        f"swaps {s['swaps']}, adapted plans {s['adapted_plans']}, episodes {s['episodes']}; "
        f"plan p50 {s['plan_ms_p50']:.1f} ms, p99 {s['plan_ms_p99']:.1f} ms; state to command p50 "
        f"{s['act_ms_p50']:.1f} ms, p99 {s['act_ms_p99']:.1f} ms; model {result.version}"
    )
    if s["interventions"]:
        print("interventions (ticks): " + ", ".join(f"{k} {v}" for k, v in s["interventions"].items()))
    if scheduling.requested:
        wanted = f"control thread {scheduling.describe()}; planner thread {scheduling.planner().describe()}"
        print(
            f"scheduling: {wanted}"
            if not result.scheduling_problems
            else f"scheduling: asked for {wanted}; not done: {'; '.join(result.scheduling_problems)}"
        )
    if result.bag is not None:
        print(f"bag: {result.bag}")
    if result.interrupted:
        print("stopped by Ctrl-C (robot held, bag closed)")
        return 130
    return 0
