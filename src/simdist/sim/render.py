"""`simdist render`: a short video (.mp4, .gif) or image strip (.png) of a rollout, to see the scene."""

from __future__ import annotations

import argparse
from pathlib import Path

import imageio.v3 as iio
import mujoco
import numpy as np

from simdist import atomic, robots
from simdist.cli import add_task_arguments
from simdist.config import parse_overrides
from simdist.errors import ConfigError
from simdist.sim import make_env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(parser)
    parser.add_argument("--out", required=True, help="output file: .mp4, .gif or .png (image strip)")
    parser.add_argument(
        "--policy", choices=["scripted", "random", "zero"], default="scripted", help="actions to roll out"
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="rollout length")
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--size", type=int, nargs=2, default=[320, 240], metavar=("W", "H"))
    parser.add_argument("--seed", type=int, default=0)


def render_rollout(
    task: str,
    profile: str,
    overrides: dict,
    policy: str,
    seconds: float,
    fps: int,
    size: tuple[int, int],
    seed: int,
) -> list[np.ndarray]:
    env = make_env(task, profile, num_envs=1, seed=seed, overrides=overrides)
    env.reset(seed=seed)
    renderer = mujoco.Renderer(env.models[0], size[1], size[0])
    camera = robots.get(env.cfg.robot).camera
    rng = np.random.default_rng(seed)
    every = max(1, round(env.cfg.control_hz / fps))
    frames = []
    for step in range(int(seconds * env.cfg.control_hz)):
        if policy == "scripted":
            action = env.scripted_action()
        elif policy == "random":
            action = rng.uniform(-1, 1, (1, env.action_dim))
        else:
            action = np.zeros((1, env.action_dim))
        env.step(action)
        if step % every == 0:
            renderer.update_scene(env.datas[0], camera=camera)
            frames.append(renderer.render().copy())
    renderer.close()
    env.close()
    return frames


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix not in (".mp4", ".gif", ".png"):
        raise ConfigError(f"--out must end in .mp4, .gif or .png, got '{out.name}'")
    frames = render_rollout(
        args.task,
        args.profile,
        parse_overrides(args.overrides),
        args.policy,
        args.seconds,
        args.fps,
        tuple(args.size),
        args.seed,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(out) as tmp:
        if out.suffix == ".png":
            picks = np.linspace(0, len(frames) - 1, 6).astype(int)
            iio.imwrite(tmp, np.concatenate([frames[i] for i in picks], axis=1))
        elif out.suffix == ".gif":
            iio.imwrite(tmp, np.stack(frames), duration=1000 / args.fps, loop=0)
        else:
            iio.imwrite(tmp, np.stack(frames), fps=args.fps, codec="libx264")
    print(f"wrote {out} ({len(frames)} frames, {args.task}/{args.profile})")
    return 0
