"""`simdist bench data`: generated transitions per second (policy inference, critic, noise and recording
included) as a ratio to raw vector-env stepping with random actions, measured in the same run."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simdist.config import parse_overrides
from simdist.data.generate import generate_shard, load_data_config
from simdist.experts.config import load_expert_config
from simdist.experts.policy import Expert
from simdist.experts.train import untrained_expert
from simdist.sim import make_env
from simdist.sim.config import load_task


def bench(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_task(args.task, parse_overrides(args.overrides))
    dcfg = load_data_config("default")
    if args.num_envs:
        dcfg = dataclasses.replace(dcfg, num_envs=args.num_envs)
    expert_dir = Path(f"runs/experts/{cfg.task}")
    trained = (expert_dir / "manifest.json").is_file()
    with tempfile.TemporaryDirectory() as tmp:
        if not trained:
            expert_dir = untrained_expert(cfg, load_expert_config("default"), Path(tmp) / "expert")
        expert = Expert(expert_dir)
        env = make_env(cfg, "sim", num_envs=dcfg.num_envs, seed=0, randomize=True)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        start, batches, budget = time.perf_counter(), 0, args.seconds or 3.0
        while batches == 0 or time.perf_counter() - start < budget:  # the raw env for `seconds` of wall time
            env.step(rng.uniform(-1, 1, (dcfg.num_envs, env.action_dim)))
            batches += 1
        steps = batches * dcfg.num_envs  # generation records as many transitions as the raw env stepped
        raw = steps / (time.perf_counter() - start)
        env.close()
        start = time.perf_counter()
        episodes = generate_shard(cfg, dcfg, expert, shard=0, target_steps=steps)
        recorded = sum(len(e["proprio"]) for e, _ in episodes)
        gen = recorded / (time.perf_counter() - start)
    return {
        "task": cfg.task,
        "num_envs": dcfg.num_envs,
        "expert": "trained" if trained else "untrained (same sizes)",
        "raw_env_steps_per_s": raw,
        "generated_transitions_per_s": gen,
        "ratio_to_raw": gen / raw,
    }


def summary(r: dict[str, Any]) -> str:
    return (
        f"{r['task']} data generation ({r['num_envs']} envs, {r['expert']} expert)\n"
        f"  raw vector env, random actions : {r['raw_env_steps_per_s']:8.0f} steps/s\n"
        f"  generation (policy+critic+rec.) : {r['generated_transitions_per_s']:8.0f} transitions/s   "
        f"ratio to raw {r['ratio_to_raw']:.2f}"
    )
