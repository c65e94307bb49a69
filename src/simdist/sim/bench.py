"""`simdist bench sim`: vector-env steps per second against raw `mj_step` of the same model in the same run."""

from __future__ import annotations

import argparse
import time
from typing import Any

import mujoco
import numpy as np

from simdist.config import parse_overrides
from simdist.sim import make_env


def _rate(fn, seconds: float) -> float:
    """Calls of fn per second over about `seconds` (after one warm-up call)."""
    fn()
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        count += 1
    return count / elapsed


def bench(args: argparse.Namespace) -> dict[str, Any]:
    num_envs = args.num_envs or 16
    seconds = args.seconds or 3.0
    overrides = parse_overrides(args.overrides)
    results: dict[str, Any] = {"task": args.task, "profile": args.profile, "num_envs": num_envs}
    env = make_env(args.task, args.profile, num_envs=num_envs, seed=0, overrides=overrides)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    substeps = env.cfg.substeps
    models, datas = env.models, env.datas
    actions = rng.uniform(-0.3, 0.3, (64, num_envs, env.action_dim)).astype(np.float32)
    tick = [0]

    def raw() -> None:  # the floor: the same servo targets, then physics alone (no Python per substep)
        env.set_targets(actions[tick[0] % 64])
        tick[0] += 1
        for m, d in zip(models, datas, strict=True):
            mujoco.mj_step(m, d, nstep=substeps)

    raw_rate = _rate(raw, seconds) * num_envs  # control periods simulated per second
    env.reset(seed=0)
    tick[0] = 0

    def step(e=env) -> None:
        e.step(actions[tick[0] % 64])
        tick[0] += 1

    env_rate = _rate(step, seconds) * num_envs
    env.close()
    results.update(
        raw_steps_per_s=raw_rate,
        env_steps_per_s=env_rate,
        ratio_to_raw=env_rate / raw_rate,
        physics_steps_per_env_step=substeps,
    )
    env2 = make_env(args.task, args.profile, num_envs=num_envs, seed=0, overrides=overrides, threads=2)
    env2.reset(seed=0)
    tick[0] = 0
    threaded = _rate(lambda: step(env2), seconds) * num_envs
    env2.close()
    results.update(env_steps_per_s_2threads=threaded, ratio_to_raw_2threads=threaded / raw_rate)
    return results


def summary(r: dict[str, Any]) -> str:
    return (
        f"{r['task']} ({r['profile']}, {r['num_envs']} envs, {r['physics_steps_per_env_step']} physics steps per env step)\n"
        f"  raw mj_step, 1 thread : {r['raw_steps_per_s']:9.0f} env-steps/s equivalent\n"
        f"  vector env, 1 thread  : {r['env_steps_per_s']:9.0f} env-steps/s   ratio to raw {r['ratio_to_raw']:.2f}\n"
        f"  vector env, 2 threads : {r['env_steps_per_s_2threads']:9.0f} env-steps/s   ratio to raw {r['ratio_to_raw_2threads']:.2f}"
    )
