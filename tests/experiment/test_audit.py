"""`plan-grid --audit-every`: candidates rolled out in copies of the simulator, the audited run left as it was."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from simdist.experiment import audit, grid
from simdist.runtime.scratch import write_random_checkpoint
from simdist.sim import make_env


def test_spearman_ranks_not_values() -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert audit.spearman(a, a**3) == pytest.approx(1.0)
    assert audit.spearman(a, -np.exp(a)) == pytest.approx(-1.0)
    assert audit.spearman(a, np.array([2.0, 1.0, 4.0, 3.0])) == pytest.approx(0.6)
    assert np.isnan(audit.spearman(a, np.ones(4)))  # a constant has no ranking
    assert np.isnan(audit.spearman(a[:2], a[:2]))


@pytest.mark.parametrize(
    ("task", "profile", "native"),
    [("go2_foam", "foam", "1"), ("ur5e_peg", "real", "1"), ("ur5e_peg", "real", "0")],
    ids=["go2", "ur5e-native-servo", "ur5e-numpy-servo"],
)
def test_rollouts_step_copies_and_leave_the_env_alone(
    task: str, profile: str, native: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMDIST_NATIVE", native)  # the UR5e's servo in C (its library is not copied) or numpy
    env = make_env(task, profile, num_envs=1, seed=3)
    twin = make_env(task, profile, num_envs=1, seed=3)
    env.reset(seed=3)
    twin.reset(seed=3)
    rng = np.random.default_rng(0)
    chunks = rng.normal(0, 0.5, (3, 6, env.action_dim)).astype(np.float32)
    chunks[:, :, 2] -= 1.0 if task == "ur5e_peg" else 0.0  # down onto the hole's surroundings: contact
    chunks[2] = chunks[0]
    first, seen, valid = audit.rollouts(env, chunks, 0.99)
    assert first[0] == first[2]  # the same chunk from the same state: the same true reward
    assert first[0] != first[1]
    again, seen_again, _ = audit.rollouts(env, chunks, 0.99)
    assert np.array_equal(again, first) and np.array_equal(seen_again, seen)  # copies: env is where it was
    assert seen.shape == (3, 6, env.proprio_dim)
    # ... and stepping env now matches its twin that never had copies made of it
    expected = 0.0
    for k, action in enumerate(chunks[1]):
        o_env, r_env, _, _, info = env.step(action[None])
        _, r_twin, *_ = twin.step(action[None])
        assert r_env[0] == r_twin[0]
        expected += 0.99**k * float(r_env[0])
        if info["done"][0]:  # the rollout stopped here: its last observation is this step's, repeated
            assert not valid[1, k + 1 :].any()
            assert np.array_equal(seen[1, k:], np.repeat(info["final_obs"]["proprio"][:1], 6 - k, 0))
            break
        assert valid[1, k] and np.array_equal(seen[1, k], o_env["proprio"][0])  # what the robot truly met
    assert first[1] == pytest.approx(expected)


@pytest.fixture(scope="module")
def go2_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("audit") / "go2", "go2_foam")


def test_an_audited_run_is_the_unaudited_run_and_the_policy_chunk_is_a_candidate(go2_model: Path) -> None:
    settings = [grid.parse_setting("small:num_samples=4,num_policy_samples=4,elites=2")]
    # 20-tick episodes that never end in a fall (a random model's robot would fall at a different tick each time)
    no_falls = {"termination.max_tilt_deg": 180.0, "termination.min_base_height": -1.0}
    no_falls["termination.contact_force_n"] = 1e9
    kwargs = {"episodes": 1, "say": lambda _: None, "overrides": {"episode_seconds": 0.4, **no_falls}}
    plain = grid.measure("go2_foam", "foam", go2_model, [0], settings, **kwargs)["cells"]["v0000 small"]
    audited = grid.measure("go2_foam", "foam", go2_model, [0], settings, audit_every=3, **kwargs)["cells"][
        "v0000 small"
    ]
    assert audited["per_episode"] == plain["per_episode"]  # copies were stepped, never the robot
    report = audited["audit"]
    # 61 ticks (3 episodes of 20, and the tick that sees the last end), the first before the auditor attaches:
    # every 3rd of the other 60
    assert report["ticks"] == 20 and report["every"] == 3
    # the base policy's chunk is itself a candidate, so the best candidate is never truly worse than it
    assert report["gain_best"]["mean"] >= 0.0
    assert -1.0 <= report["rank_reward"]["mean"] <= 1.0
    assert report["error_reward"]["mean"] >= abs(report["bias_reward"]["mean"])
    assert -1.0 <= report["rank_head_truth"]["mean"] <= 1.0
    # a random model's dynamics do not know the robot: its latents are off those the encoder reads from the truth
    assert report["latent_error_gauss"]["mean"] > 0.0 and report["latent_error_policy"]["mean"] > 0.0


def test_each_gait_of_the_policy_is_audited_beside_the_base_chunk(go2_model: Path) -> None:
    settings = [
        grid.parse_setting(
            "gaits:num_samples=4,num_policy_samples=4,elites=2,policy_command_scales=[0.5,1.5]"
        )
    ]
    no_falls = {"termination.max_tilt_deg": 180.0, "termination.min_base_height": -1.0}
    no_falls["termination.contact_force_n"] = 1e9
    kwargs = {"episodes": 1, "say": lambda _: None, "overrides": {"episode_seconds": 0.2, **no_falls}}
    cell = grid.measure("go2_foam", "foam", go2_model, [0], settings, audit_every=2, **kwargs)["cells"][
        "v0000 gaits"
    ]
    report = cell["audit"]
    for label in ("x1", "x0.5", "x1.5"):
        for figure in ("bias", "gain", "predicted_gain", "score_gain"):
            assert f"{figure}_{label}" in report
    # `x1` is the base chunk (the one rolled out as the policy's): no true gain over itself
    assert report["gain_x1"]["mean"] == 0.0
    # the other gaits differ from it, in truth and as predicted
    assert report["gain_x0.5"]["mean"] != 0.0 and report["predicted_gain_x1.5"]["mean"] != 0.0
    assert report["score_gain_x0.5"]["mean"] != 0.0


def test_proposal_labels_follow_the_planners_order() -> None:
    # the planner's own decoding of its best chunk: divmod(index, leads + 1) = (scale index, lead)
    cfg = SimpleNamespace(policy_command_scales=[0.5], policy_max_lead=1)
    assert audit.proposal_labels(cfg) == ["x1+0", "x1+1", "x0.5+0", "x0.5+1"]
    cfg = SimpleNamespace(policy_command_scales=[1.5, 0.75], policy_max_lead=0)
    assert audit.proposal_labels(cfg) == ["x1", "x1.5", "x0.75"]
