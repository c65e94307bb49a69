"""The peg's force-guided search controller on the chamfered hole, from the robot's measurements alone."""

import numpy as np
import pytest

from simdist.robots.ur5e.search import SearchGains, search_action
from simdist.sim import load_task, make_env


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


def _measured(tip_from_estimate: tuple[float, float, float], force_on_peg: tuple[float, float, float]):
    """(proprio, command) for one arm: tool pointing down at yaw 0, the tip placed relative to the estimate."""
    command = np.array([[0.49, 0.13, 0.04, 0.0]])
    proprio = np.zeros((1, 31))
    proprio[0, 12:15] = command[0, :3] + np.asarray(tip_from_estimate)
    proprio[0, 15:19] = [0.0, 1.0, 0.0, 0.0]  # the tool frame is the world turned upside down about x
    # the sensor reads the force the peg exerts, in the tool frame: minus the force on it, y and z flipped
    fx, fy, fz = force_on_peg
    proprio[0, 25:28] = [-fx, fy, fz]
    return proprio, command


def test_each_phase_acts_on_the_measurements_alone():
    act = lambda tip, force: search_action(*_measured(tip, force), 0.5, 0.01, 0.05)[0]  # noqa: E731
    far = act(
        (0.005, -0.004, 0.05), (0.0, 0.0, 0.0)
    )  # free space, 6 mm off the estimate: move over it, no descent
    assert far[0] < 0 < far[1] and far[2] == 0.0
    near = act((0.001, 0.0, 0.05), (0.0, 0.0, 0.0))  # within 3 mm of it: descend
    assert near[2] < 0
    pressing = act((0.002, 0.0, 0.0), (0.0, 0.0, 30.0))  # on the surface, pressing harder than 15 N: ease off
    assert pressing[2] > 0 and np.hypot(pressing[0], pressing[1]) > 0.05  # and keep searching
    chamfer = act((0.003, 0.0, -0.002), (-20.0, 0.0, 20.0))  # on the chamfer, pushed towards -x: follow it
    assert chamfer[0] < 0 and abs(chamfer[1]) < 1e-6 and chamfer[2] < 0
    assert all(np.all(np.abs(a) <= 1.0) for a in (far, near, pressing, chamfer))


def _episode_end(end_on_success: bool) -> tuple[int | None, int, bool]:
    """One scripted episode: (the step the peg went in, the step the episode ended, whether as a time-out)."""
    overrides = {"nominal.sensor_noise_scale": 0, "peg.end_on_success": end_on_success}
    env = make_env("ur5e_peg", "sim", num_envs=1, seed=4, overrides=overrides)
    env.reset(seed=4)
    inserted_at = None
    for step in range(1, env.cfg.episode_steps + 1):
        _, _, terminated, truncated, info = env.step(env.scripted_action())
        done = bool(info["done"][0])
        inserted = info["final_metrics"]["success"][0] if done else env.success[0]
        if inserted and inserted_at is None:
            inserted_at = step
        if done:
            return inserted_at, step, bool(truncated[0] and not terminated[0])
    raise AssertionError("the episode never ended")


def test_with_end_on_success_an_episode_ends_as_the_peg_goes_in_and_not_before():
    """A real cell's script stops at insertion: the episode ends there as a time-out (not a fall); else the arm holds."""
    inserted_at, held_until, timed_out = _episode_end(False)
    assert inserted_at is not None and inserted_at < held_until == load_task("ur5e_peg").episode_steps
    assert timed_out
    assert _episode_end(True) == (inserted_at, inserted_at, True)
