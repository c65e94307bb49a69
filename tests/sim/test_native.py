"""The UR5e's C servo (peg_servo.c, built at first use) against the numpy path, and its fallbacks."""

import logging

import numpy as np
import pytest

from simdist.sim import make_env, native


def _skip_without_compiler() -> None:
    """Skip where no C compiler exists; where one does, the native servo must build (a failure is a bug)."""
    try:
        native._compiler()
    except OSError:
        pytest.skip("no C compiler here: the native servo is unavailable")


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """An empty build cache and no library loaded yet in this process (restored afterwards)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SIMDIST_NATIVE", raising=False)
    native._load.cache_clear()
    yield tmp_path / "simdist"
    native._load.cache_clear()


def _joint_positions(profile: str, randomize: bool, threads: int = 1, n: int = 3, steps: int = 20):
    env = make_env("ur5e_peg", profile, num_envs=n, seed=5, randomize=randomize, threads=threads)
    env.reset(seed=5)
    rng = np.random.default_rng(1)
    out = [np.stack([d.qpos[:6].copy() for d in env.datas])]  # the start pose, solved by IK
    for _ in range(steps):
        env.step(rng.uniform(-1, 1, (n, env.action_dim)))
        out.append(np.stack([d.qpos[:6].copy() for d in env.datas]))
    env.close()
    return np.array(out), env.joint_target.copy(), env._servo is not None


@pytest.mark.parametrize(("profile", "randomize"), [("sim", True), ("real", False)])
def test_native_servo_matches_numpy(monkeypatch, profile, randomize):
    _skip_without_compiler()
    q_native, target_native, used_native = _joint_positions(profile, randomize)
    assert used_native
    monkeypatch.setenv("SIMDIST_NATIVE", "0")
    q_numpy, target_numpy, used = _joint_positions(profile, randomize)
    assert not used
    assert np.abs(q_native[-1] - q_native[0]).max() > 0.05  # the arm moved
    np.testing.assert_allclose(q_native, q_numpy, rtol=0, atol=1e-6)
    np.testing.assert_allclose(target_native, target_numpy, rtol=0, atol=1e-6)
    monkeypatch.delenv("SIMDIST_NATIVE")
    q_threads, _, _ = _joint_positions(profile, randomize, threads=2)
    np.testing.assert_array_equal(q_threads, q_native)  # members are independent: threads change nothing


@pytest.mark.parametrize(
    ("cc", "reason"), [("/nonexistent/cc", "/nonexistent/cc not found"), ("false", "false failed")]
)
def test_without_compiler_falls_back_with_one_warning(fresh_build, monkeypatch, caplog, cc, reason):
    monkeypatch.setenv("CC", cc)
    with caplog.at_level(logging.WARNING, logger="simdist.sim.native"):
        env = make_env("ur5e_peg", "sim", num_envs=2, seed=0)
        make_env("ur5e_peg", "sim", num_envs=2, seed=0)
    assert env._servo is None
    assert len(caplog.records) == 1 and reason in caplog.records[0].getMessage()
    env.reset(seed=0)
    obs, *_ = env.step(np.full((2, 4), 0.5))
    assert np.isfinite(obs["proprio"]).all()
    assert not fresh_build.exists() or not any(fresh_build.iterdir())


def test_corrupt_cached_library_is_rebuilt(fresh_build):
    garbage = native.library_path("peg_servo")
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"not a shared library")
    _skip_without_compiler()
    assert native.load("peg_servo") is not None
    assert garbage.read_bytes()[:4] == b"\x7fELF"
    assert [p.name for p in fresh_build.iterdir()] == [garbage.name]  # no temporary file left behind


def test_cached_library_needs_no_compiler(fresh_build, monkeypatch):
    _skip_without_compiler()
    assert native.load("peg_servo") is not None
    native._load.cache_clear()
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert native.load("peg_servo") is not None


def test_corrupt_cached_library_without_compiler_falls_back(fresh_build, monkeypatch, caplog):
    garbage = native.library_path("peg_servo")
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"\0" * 64)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.WARNING, logger="simdist.sim.native"):
        assert native.load("peg_servo") is None
    assert len(caplog.records) == 1 and "no C compiler" in caplog.records[0].getMessage()


def test_switch_forces_numpy(monkeypatch):
    monkeypatch.setenv("SIMDIST_NATIVE", "0")
    assert make_env("ur5e_peg", "sim", num_envs=1, seed=0)._servo is None
