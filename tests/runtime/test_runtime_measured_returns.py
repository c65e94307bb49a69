"""The return the robot earned, from its bags: ended by a fall (nothing follows) or cut by a time-out, a gap or an
unmeasured step (the steady value of the last rewards follows), and the fall read from the bag's episode end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simdist.bags import BagWriter
from simdist.runtime.real_data import measured_returns, real_episodes

G = 0.9


def test_a_fall_ends_the_return_and_a_time_out_continues_it() -> None:
    rewards = np.array([1.0, 2.0, 4.0], np.float32)
    fell = measured_returns({"reward": rewards, "terminal": np.array([False, False, True])}, G)
    assert fell == pytest.approx([1 + G * 2 + G * G * 4, 2 + G * 4, 4])
    # a time-out: the robot would have gone on earning the mean of its last `tail` rewards
    timed_out = measured_returns({"reward": rewards, "terminal": np.zeros(3, bool)}, G, tail=2)
    steady = 3.0 / (1 - G)
    assert timed_out == pytest.approx(
        [1 + G * (2 + G * (4 + G * steady)), 2 + G * (4 + G * steady), 4 + G * steady]
    )
    # an unmeasured step cuts it there (even where the episode later fell), and nothing after it is a target
    cut = measured_returns(
        {"reward": np.array([1.0, 1.0, np.nan, 5.0], np.float32), "terminal": np.array([0, 0, 0, 1], bool)}, G
    )
    assert cut[:2] == pytest.approx([1 + G / (1 - G), 1 / (1 - G)]) and np.isnan(cut[2:]).all()
    assert np.isnan(measured_returns({"reward": np.full(4, np.nan), "terminal": np.zeros(4, bool)}, G)).all()


def test_the_bag_says_which_episodes_ended_in_a_fall(tmp_path: Path) -> None:
    path = tmp_path / "run_01"
    with BagWriter(path, robot="go2", reward=True) as bag:
        for fell in (1.0, 0.0):
            bag.start_episode(model_version="v0000")
            for i in range(5):
                bag.append(observation=np.full(35, i), action=np.zeros(12), command=np.zeros(3), reward=1.0)
            bag.end_episode(success=False, metrics={"progress_m": 0.3, "fell": fell})
        # the robot's own word where it gives one: a protective stop that is no fall terminates too
        bag.start_episode(model_version="v0000")
        for i in range(3):
            bag.append(observation=np.full(35, i), action=np.zeros(12), command=np.zeros(3), reward=1.0)
        bag.end_episode(success=False, metrics={"fell": 0.0}, terminated=True)
    first, second, stopped = real_episodes([path])
    assert first["terminal"].tolist() == [False] * 4 + [True]
    assert not second["terminal"].any() and stopped["terminal"].tolist() == [False, False, True]


def test_a_deployed_run_records_which_episodes_terminated(tmp_path: Path) -> None:
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from fast_planner import FAST_PLANNER

    from simdist.bags import read_episodes
    from simdist.runtime.deploy import run_deploy
    from simdist.runtime.scratch import write_random_checkpoint

    torch.set_num_threads(1)
    model = write_random_checkpoint(tmp_path / "model", "go2_slope")
    result = run_deploy(
        "go2_slope",
        "sim:ptfe",
        model,
        seconds=3.0,
        bag_dir=tmp_path / "bags",
        seed=0,
        overrides={"episode_seconds": 0.5},
        planner_overrides=FAST_PLANNER,
    )
    ended = result.stats.episodes
    episodes = read_episodes(result.bag)
    assert len(ended) >= 3
    for e, recorded in zip(ended, episodes, strict=False):
        assert bool(recorded["terminal"][-1]) == bool(e["terminated"]) == bool(e["metrics"]["fell"])
