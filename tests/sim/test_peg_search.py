"""The peg's force-guided search controller on the chamfered hole, from the robot's measurements alone."""

import numpy as np
import pytest

from simdist.sim import make_env
from simdist.sim.peg_search import SearchGains, search_action


def _insert(offset_m: tuple[float, float], gains: SearchGains | None = None) -> tuple[bool, int]:
    """One episode with the hole estimate `offset_m` off the true hole: (inserted, steps spent on the top surface)."""
    env = make_env("ur5e_peg", "sim", num_envs=1, seed=4, overrides={"nominal.sensor_noise_scale": 0})
    obs, _ = env.reset(seed=4)
    env.command[0, :2] = env.hole_pose[0, :2] + np.asarray(offset_m)
    env.command[0, 3] = env.hole_pose[0, 3]
    on_top = 0
    for _ in range(env.cfg.episode_steps - 1):  # the last step would reset the episode
        obs = env.observe()
        action = search_action(obs["proprio"], obs["command"], 0.5, 0.01, 0.05, gains or SearchGains())
        height = obs["proprio"][0, 14] - env.command[0, 2]
        on_top += bool(abs(height) < 0.0008 and np.abs(obs["proprio"][0, 25:28]).max() > 5.0)
        env.step(action)
    return bool(env.success[0]), on_top


@pytest.mark.parametrize("offset", [(0.0, 0.0), (0.003, -0.002)])
def test_the_chamfer_guides_an_estimate_within_its_width_straight_in(offset):
    inserted, on_top = _insert(offset)
    assert inserted and on_top <= 2


@pytest.mark.parametrize("offset", [(0.006, 0.0), (0.0, -0.0065)])
def test_the_spiral_finds_a_hole_beyond_the_chamfer(offset):
    inserted, on_top = _insert(offset)
    assert inserted and on_top >= 3  # it landed on the top surface and searched
    # without the spiral it presses where it landed and never gets in
    assert not _insert(offset, SearchGains(spiral_speed=0.0))[0]


def test_the_controller_reads_no_privileged_state():
    env = make_env("ur5e_peg", "sim", num_envs=3, seed=1)
    obs, _ = env.reset(seed=1)
    action = search_action(obs["proprio"], obs["command"], 0.5, 0.01, 0.05)
    env.hole_pose[:, :2] += 0.01  # the truth moves, the measurements do not
    assert np.array_equal(action, search_action(obs["proprio"], obs["command"], 0.5, 0.01, 0.05))
    assert np.all(np.abs(action) <= 1.0) and action.dtype == np.float32
