"""A robot the project does not ship, from its own files only: the cart-pole of this package runs through deploy,
bag logging, finetuning on its bag and a hot swap, on the tiny preset (docs/adding_a_robot.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fast_planner import FAST_PLANNER

import cartpole
from simdist import robots
from simdist.bags import read_episodes, schema
from simdist.bags.reader import read_topics
from simdist.errors import ConfigError
from simdist.hardware.sim_robot import SimRobot
from simdist.model.checkpoint import current_version, list_versions
from simdist.runtime.deploy import run_deploy
from simdist.runtime.finetune import finetune
from simdist.runtime.finetune_options import FinetuneOptions
from simdist.runtime.loop import DeployLoop
from simdist.runtime.scratch import write_random_checkpoint
from simdist.runtime.store import ModelStore
from simdist.sim.config import load_task

TASK = "cartpole_balance"
QUICK = FinetuneOptions(lr=1e-3, max_steps=60, eval_every=20, warmup_steps=5, val_fraction=0.2, patience=10)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("cartpole") / "model", TASK)


def test_the_robot_is_known_by_name_and_its_task_by_its_own_folder() -> None:
    assert robots.get("cartpole") is cartpole.ROBOT and "cartpole" in robots.names()
    cfg = load_task(TASK)
    assert cfg.robot == "cartpole" and cfg.control_hz == 20
    assert schema.robot_topics("cartpole") == (schema.JOINT_STATES,)  # joints only: no IMU, no tool
    with pytest.raises(ConfigError, match="cartpole, go2, ur5e"):
        robots.get("spot")


def test_the_robot_measures_what_its_env_observes() -> None:
    robot = SimRobot(TASK, "sim", seed=2, overrides={"nominal.sensor_noise_scale": 0})
    rng = np.random.default_rng(0)
    try:
        for _ in range(10):
            state = robot.read()
            assert state.joint_names == cartpole.JOINT_NAMES
            np.testing.assert_array_equal(cartpole.ROBOT.proprio(state), robot._obs["proprio"][0])
            robot.send_action(rng.uniform(-1, 1, 1))
        assert robot.hold_action().tolist() == [0.0]  # a push: holding is not pushing
        with pytest.raises(NotImplementedError, match="no damping mode"):
            robot.damp()
    finally:
        robot.stop()


def test_deploy_logs_a_bag_that_finetunes_a_version_which_hot_swaps_in(model: Path, tmp_path: Path) -> None:
    first = run_deploy(
        TASK, "sim:heavy", model, ticks=150, bag_dir=tmp_path / "bags", planner_overrides=FAST_PLANNER
    )
    assert first.stats.ticks == 150 and first.stats.errors == 0 and first.stats.fresh == 150
    (bag,) = sorted((tmp_path / "bags").glob("run_*"))
    messages = read_topics(bag, schema.topics_for("cartpole"))
    assert len(messages[schema.JOINT_STATES]) == len(messages[schema.OBSERVATION]) == 150
    assert messages[schema.JOINT_STATES][0][1].name == list(cartpole.JOINT_NAMES)
    episodes = read_episodes(bag)
    assert sum(len(e["proprio"]) for e in episodes) == 150 and episodes[0]["proprio"].shape[1] == 4
    # every ended episode, and the one still running unless the last tick ended one
    ended = len(first.stats.episodes)
    running = 150 - sum(len(e["proprio"]) for e in episodes[:ended])
    assert len(episodes) == ended + (running > 0) and running >= 0

    store = ModelStore(model, poll_s=0.01).start()
    labels: list[str] = []
    reports: list = []

    def on_tick(k: int, loop: DeployLoop) -> None:
        labels.append(loop.store.label)
        if k == 5:  # finetune on the first run's bag while the robot runs, as `simdist adapt` does
            reports.append(finetune(model, [bag], QUICK))
            end = time.monotonic() + 30.0  # lockstep: let the watcher load and validate it first
            while store._staged is None and time.monotonic() < end:
                time.sleep(0.01)

    try:
        second = run_deploy(
            TASK,
            "sim:heavy",
            store,
            ticks=20,
            bag_dir=tmp_path / "bags",
            planner_overrides=FAST_PLANNER,
            on_tick=on_tick,
        )
    finally:
        store.stop()
    (report,) = reports
    assert report.published and report.version == 1 and report.after < report.before, report.reason
    assert list_versions(model) == [0, 1] and current_version(model) == 1
    assert second.stats.swaps == 1 and labels[:6] == ["v0000"] * 6 and labels[6:] == ["v0001"] * 14
    new_bag = sorted((tmp_path / "bags").glob("run_*"))[-1]
    versions = [e["model_version"] for e in _events(new_bag) if e["event"] == schema.MODEL_VERSION]
    assert versions == ["v0001"]


def _events(bag: Path) -> list[dict]:
    return [json.loads(m.data) for _, m in read_topics(bag, [schema.EVENTS])[schema.EVENTS]]


def test_another_process_finds_the_robot_through_simdist_robots() -> None:
    env = {**os.environ, "SIMDIST_ROBOTS": "cartpole", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = "from simdist.sim.config import load_task; print(load_task('cartpole_balance').robot)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "cartpole", done.stderr
    env["SIMDIST_ROBOTS"] = "no_such_robot_module"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert (
        done.returncode != 0
        and "SIMDIST_ROBOTS: cannot import robot module 'no_such_robot_module'" in done.stderr
    )


def test_adapt_evaluates_it_on_its_own_protocol(model: Path) -> None:
    from simdist.runtime.adapt import evaluate_on_robot

    metric, value, ended = evaluate_on_robot(
        load_task(TASK), "heavy", ModelStore(model), planner_overrides=FAST_PLANNER, episodes=2
    )
    assert metric == "time balanced (s)" and len(ended) == 2
    assert value == np.mean([e["metrics"]["balanced_s"] for e in ended]) and 0.0 < value <= 3.0
