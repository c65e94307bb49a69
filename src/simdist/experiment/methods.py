"""The adapting methods of `simdist experiment`, one real-data budget each: the world-model methods (SimDist, full
finetuning on SimDist's very bags, the oracle's SimDist loop), PPO finetuning from the expert, and the oracle's
model (pretrained with the profile inside the randomisation)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simdist import atomic, robots
from simdist.experiment.config import EVAL_SEED, increments, rl_geometry
from simdist.experiment.report import PointResult

if TYPE_CHECKING:
    from simdist.experiment.run import Run


@dataclass
class Track:
    """A world-model method's working checkpoint (a copy of its starting model) and its counters."""

    method: str
    folder: Path
    trainable: str
    steps: int = 0
    data_steps: int = 0
    note: str = ""


def copy_model(source: Path, dest: Path) -> Path:
    ignore = shutil.ignore_patterns("reports", "tb", "eval", atomic.TMP_PATTERN, "optimizer.safetensors")
    return Path(shutil.copytree(source, dest, ignore=ignore))


def world_model_methods(
    run: Run, seed: int, lead: Track, followers: list[Track], zero: tuple[float, list[float]] | None
) -> None:
    """Collect with `lead`'s current model; finetune `lead` and every follower on all the data so far; evaluate.

    `zero` is the zero-shot value of the lead's starting model (reused at a point without data, when known).
    """
    from simdist.model.checkpoint import current_version, version_label
    from simdist.runtime.adapt import completed
    from simdist.runtime.deploy import run_deploy
    from simdist.runtime.finetune import finetune
    from simdist.runtime.real_data import real_episodes

    ecfg, result = run.ecfg, run.result
    tracks = [lead, *followers]
    bags: list[Path] = []
    steps = result.budget
    for i, (minutes, increment) in enumerate(zip(result.points, increments(steps), strict=True)):
        if increment > 0:
            run.log(f"seed {seed}, {lead.method}: collecting {increment} steps ({minutes:g} min in all)")
            with run.timed(lead.method, "collect"):
                deployed = run_deploy(
                    run.cfg,
                    f"sim:{run.profile}",
                    lead.folder,
                    ticks=increment,
                    bag_dir=run.out / f"seed_{seed}" / lead.method / "bags",
                    overrides=run.overrides,
                    planner=ecfg.planner,
                    planner_overrides=ecfg.planner_overrides,
                    seed=1000 * seed + i,
                )
            completed(deployed)  # a collection cut short is not the budget's data
            assert deployed.bag is not None
            bags.append(deployed.bag)
            lead.steps += deployed.stats.ticks
            data_steps = sum(len(e["proprio"]) for e in real_episodes(bags))
            for track in tracks:
                track.steps, track.data_steps = lead.steps, data_steps
                with run.timed(track.method, "finetune"):
                    report = finetune(
                        track.folder,
                        bags,
                        ecfg.finetune_options(trainable=track.trainable, seed=seed),
                        out=track.folder.parent / f"model_{i:02d}" if track.trainable == "all" else None,
                    )
                track.folder = Path(report.model)  # full finetuning's new model of its own, else the same
                track.note = "" if report.published else "gate refused: kept the previous version"
        for track in tracks:
            if track.steps == 0 and zero is not None:
                # no data yet: the starting model, already evaluated on the same episodes
                value, episodes = zero
            else:
                with run.timed(track.method, "evaluate"):
                    value, episodes = run.evaluate_model(track.folder, seed)
            with run.timed("prediction view", "latent error"):
                latent = run.heldout_error(track.folder)
            run.record(
                PointResult(
                    method=track.method,
                    seed=seed,
                    minutes=minutes,
                    steps=track.steps,
                    metric=result.metric,
                    performance=value,
                    episodes=episodes,
                    latent_error=latent,
                    data_steps=track.data_steps,
                    version=version_label(current_version(track.folder)),
                    note=track.note,
                ),
                f"seed {seed}, {track.method} at {minutes:g} min: {value:.3f}",
            )


def rl_method(run: Run, seed: int) -> None:
    from simdist.experiment.rl import RlFinetuner
    from simdist.experts.config import load_expert_config

    ecfg, result = run.ecfg, run.result
    preset = load_expert_config(ecfg.rl.expert_preset, dict(ecfg.rl.overrides))
    steps = increments(result.budget)
    num_envs, steps_per_env = rl_geometry(steps, preset.num_envs, preset.steps_per_env)
    result.settings["rl_geometry"] = f"{num_envs} x {steps_per_env}"
    evaluation = robots.get(run.cfg.robot).evaluation(run.cfg, ecfg.eval_episodes)
    count, key = evaluation.episodes, evaluation.metric_key
    folder = run.out / f"seed_{seed}" / "rl_finetune"
    folder.mkdir(parents=True, exist_ok=True)
    with run.timed("rl_finetune", "train"):
        tuner = RlFinetuner.create(
            run.cfg,
            run.profile,
            run.expert,
            expert_preset=ecfg.rl.expert_preset,
            num_envs=num_envs,
            steps_per_env=steps_per_env,
            seed=seed,
            expert_overrides=dict(ecfg.rl.overrides),
        )
    try:
        for i, (minutes, increment) in enumerate(zip(result.points, steps, strict=True)):
            with run.timed("rl_finetune", "train"):
                iterations = tuner.train(increment)
            with run.timed("rl_finetune", "evaluate"):
                episodes = tuner.evaluate(run.cfg, run.profile, count, EVAL_SEED + seed)
            tuner.save_actor(folder / f"actor_{i:02d}.safetensors")
            values = [float(e[key]) for e in episodes]
            value = float(np.mean(values))
            run.record(
                PointResult(
                    method="rl_finetune",
                    seed=seed,
                    minutes=minutes,
                    steps=tuner.env.env_steps,
                    metric=result.metric,
                    performance=value,
                    episodes=values,
                    note=f"{iterations} PPO iterations",
                ),
                f"seed {seed}, rl_finetune at {minutes:g} min: {value:.3f}",
            )
    finally:
        tuner.close()


def oracle_folder(run: Run, oracle_model: Path | None) -> Path:
    from simdist.experiment.oracle import oracle_randomisation, pretrain_pipeline

    widened = oracle_randomisation(run.cfg, run.profile)
    run.result.settings["oracle_randomisation"] = widened
    if oracle_model is not None:
        run.result.settings["oracle_model"] = str(oracle_model)
        return oracle_model
    o = run.ecfg.oracle
    run.log(f"oracle: generating data and pretraining with {widened}")
    with run.timed("oracle", "pretrain"):
        model = pretrain_pipeline(
            run.task,
            run.expert,
            run.out / "oracle_pretrain",
            data_preset=o.data_preset,
            train_preset=o.train_preset,
            overrides={**run.overrides, **widened},
            data_overrides=o.data_overrides,
            train_overrides=o.train_overrides,
        )
    run.result.settings["oracle_model"] = str(model)
    return model
