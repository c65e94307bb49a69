"""Each real-world profile measurably changes the dynamics against `sim` under the same open-loop actions."""

import mujoco
import numpy as np

from simdist.robots.ur5e.search import tool_yaw
from simdist.sim import load_task, make_env

FEET = ("FR", "FL", "RR", "RL")


def _loaded_foot_slip(profile: str) -> float:
    """Mean horizontal speed (m/s) of feet carrying more than 10 N during an open-loop trot on the ramp."""
    env = make_env("go2_slope", profile, num_envs=2, seed=0)
    env.reset()
    feet = [env.base_model.site(f"{leg}_foot").id for leg in FEET]
    prev = np.stack([d.site_xpos[feet] for d in env.datas])
    speeds = []
    for _ in range(100):
        env.step(env.scripted_action())
        pos = np.stack([d.site_xpos[feet] for d in env.datas])
        loaded = env._last_state["foot_force"] > 10.0
        speeds.append(np.linalg.norm((pos - prev)[..., :2], axis=-1)[loaded] / env.dt)
        prev = pos
    return float(np.concatenate(speeds).mean())


def test_go2_feet_slip_more_on_ptfe():
    sim, ptfe = _loaded_foot_slip("sim"), _loaded_foot_slip("ptfe")
    assert ptfe > 2.0 * sim, (sim, ptfe)


def _standing_sinkage(profile: str) -> float:
    env = make_env("go2_foam", profile, num_envs=1, seed=0)
    env.reset()
    for _ in range(50):
        env.step(np.zeros((1, 12)))
    m, d = env.models[0], env.datas[0]
    feet = [m.geom(f"{leg}_foot").id for leg in FEET]
    return float(np.mean([m.geom_size[g][0] - d.geom_xpos[g][2] for g in feet]))


def test_go2_sinks_about_5cm_on_foam_and_deeper_on_softer_foam():
    """Measured standing (a thigh on the foam is no fall since 2026-12-07; before, this read a robot that had
    "fallen" and been reset twice in its first second, 1.9 cm): foam_b 4.1, foam 5.5, foam_2026_11 7.3 cm."""
    assert _standing_sinkage("sim") < 0.005
    sinkage = {
        p: _standing_sinkage(p) for p in ("foam_b", "foam", "foam_2026_11")
    }  # time constant 0.05, 0.07, 0.11
    assert 0.045 <= sinkage["foam"] <= 0.065
    assert sinkage["foam_b"] < sinkage["foam"] < sinkage["foam_2026_11"]


def test_a_drop_lands_softer_and_deeper_on_foam():
    """Dropped from 10 cm, the Go2 lands on foam with a lower peak force and sinks deeper. (The base's rebound is
    the legs' PD pushing back, larger from a deeper crouch; it was lower on foam only while a thigh on the foam ended
    the episode, before 2026-12-07.)"""
    peak, lowest = {}, {}
    for profile in ("sim", "foam"):
        env = make_env("go2_foam", profile, num_envs=1, seed=0)
        env.reset()
        env.datas[0].qpos[2] += 0.1
        forces, heights = [], []
        for _ in range(40):
            env.step(np.zeros((1, 12)))
            forces.append(env._last_state["foot_force"][0].sum())
            heights.append(env.datas[0].qpos[2])
        peak[profile], lowest[profile] = max(forces), min(heights)
    assert peak["foam"] < 0.95 * peak["sim"]  # measured: 330 against 358
    assert lowest["foam"] < lowest["sim"] - 0.03  # measured: 0.123 against 0.175 m


def _peg_step_response(profile: str) -> np.ndarray:
    """Tool x after a 3 cm step of the target: distance still to go at each control step."""
    env = make_env("ur5e_peg", profile, num_envs=1, seed=0)
    env.reset()
    start = env._last_state["tool_pos"][0, 0]
    remaining = []
    for k in range(8):
        action = np.array([[1.0, 0.0, 0.0, 0.0]]) if k < 3 else np.zeros((1, 4))
        env.step(action)
        remaining.append(start + 0.03 - env._last_state["tool_pos"][0, 0])
    return np.array(remaining)


def test_ur5e_tracks_a_step_more_slowly_on_real():
    sim, real = _peg_step_response("sim"), _peg_step_response("real")
    assert abs(sim[-1]) < 0.002  # sim has arrived after 0.5 s
    assert real[3] > sim[3] + 0.005  # real is still well short one step after the command ended


def _wall_gaps(undersize_m: float) -> np.ndarray:
    """Distances (m) from the peg to the hole's four walls, the peg 1 cm into the opening, centred and square to it."""
    env = make_env("ur5e_peg", "sim", num_envs=1, seed=0, overrides={"nominal.hole_undersize_m": undersize_m})
    env.reset(seed=0)
    m, d = env.models[0], env.datas[0]
    tip = env._last_state["tool_pos"][0]
    yaw = float(tool_yaw(env._last_state["tool_quat"])[0])
    d.mocap_pos[0] = tip + [0.0, 0.0, 0.01]
    d.mocap_quat[0] = [np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)]
    mujoco.mj_forward(m, d)
    peg = m.geom("peg").id
    return np.array([mujoco.mj_geomDistance(m, d, peg, m.geom(f"wall{k}").id, 0.01, None) for k in range(4)])


def test_a_part_with_an_undersized_opening_leaves_the_peg_less_clearance_on_every_side():
    model, tight = _wall_gaps(0.0), _wall_gaps(0.0006)
    clearance = load_task("ur5e_peg").peg.clearance  # the modelled opening is this much wider than the peg
    assert clearance > 0.0006
    np.testing.assert_allclose(model, clearance / 2, atol=1e-4)  # centred: half the clearance each side
    np.testing.assert_allclose(tight, (clearance - 0.0006) / 2, atol=1e-4)


def test_an_upright_go2_on_foam_does_not_fall_and_a_low_base_does():
    """Standing on foam the thighs touch it: no fall (it was one before 2026-12-07: every ~20 steps). The base
    height over the ground plane ends an episode when it is below `min_base_height`, on the ramp along its normal."""
    env = make_env("go2_foam", "foam", num_envs=3, seed=1, eval_commands=True)
    env.reset(seed=1)
    thighs = 0
    for _ in range(150):
        _, _, terminated, _, _ = env.step(np.zeros((3, 12), np.float32))
        assert not terminated.any()
        thighs += int((env._last_state["fall_force"][:, 2:] > 1.0).any(axis=1).sum())
    assert thighs > 100  # the thighs are on the foam all along
    for task, base in (("go2_foam", 0.17), ("go2_slope", 0.21)):  # the standing base heights, measured
        for floor, falls in ((base - 0.05, False), (base + 0.05, True)):
            low = make_env(task, "sim", num_envs=2, seed=1, overrides={"termination.min_base_height": floor})
            low.reset(seed=1)
            ended = False
            for _ in range(100):
                ended |= bool(low.step(np.zeros((2, 12), np.float32))[2].any())
            assert ended == falls, (task, floor)


def test_a_diverged_episode_keeps_its_result_and_the_next_episodes_their_starts():
    """A member whose simulation blows up ends its episode with the result of its last finite state, and the
    episodes after it start where they would have (so cells still share episodes by index)."""

    def run(blow: bool) -> tuple[list[dict[str, float]], list[list[float]]]:
        env = make_env("go2_foam", "sim", num_envs=1, seed=10000)
        env.reset(seed=10000)
        ends, starts = [], []
        for t in range(360):
            if blow and t == 100:
                env.datas[0].qvel[:] = 1e12
            _, _, _, _, info = env.step(np.zeros((1, 12), np.float32))
            if info["done"][0]:
                ends.append({k: float(v[0]) for k, v in info["final_metrics"].items()})
                starts.append(env.datas[0].qpos[:3].round(6).tolist())
        return ends, starts

    clean_ends, clean_starts = run(False)
    ends, starts = run(True)
    assert (
        len(clean_ends) == len(ends) == 1
    )  # the clean episode timed out at 300 steps, the other diverged at 101
    assert starts[0] == clean_starts[0]  # the second episode starts where it would have
    assert (
        np.isfinite(ends[0]["progress_m"]) and abs(ends[0]["progress_m"]) < 0.2
    )  # where it stood, not a new start


def test_the_slope_is_tilted_in_the_physics():
    """The ramp's ground plane is tilted where the robot stands (its contacts' normal), every episode, and a Go2
    left standing on frictionless ramp slides down it; on flat ground it does not."""
    slid = {}
    for slope in (0.0, 5.0):
        env = make_env("go2_slope", "sim", num_envs=1, seed=0, overrides={"nominal.slope_deg": slope})
        for episode in range(2):
            if episode == 0:
                env.reset(seed=0)
            else:
                env._reset_one(0)  # a second episode: the ground placed again
            normal = env.datas[0].geom_xmat[env.models[0].geom("ground").id].reshape(3, 3)[:, 2]
            np.testing.assert_allclose(
                normal, [-np.sin(np.radians(slope)), 0.0, np.cos(np.radians(slope))], atol=1e-9
            )
        env.models[0].geom_friction[:, 0] = 0.0  # ice: nothing holds the robot on the ramp
        start = env.datas[0].qpos[0]
        for _ in range(50):
            env.step(np.zeros((1, 12), np.float32))
        slid[slope] = float(start - env.datas[0].qpos[0])  # down the ramp is -x
    assert abs(slid[0.0]) < 0.02 and slid[5.0] > 0.05, slid
