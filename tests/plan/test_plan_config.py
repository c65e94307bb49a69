"""Planner YAML: the authors' settings, cpu as differences from them, strict keys, per-robot sections."""

from __future__ import annotations

import pytest
import yaml

from simdist.errors import ConfigError
from simdist.plan import ActionLimits, load_planner_config, task_action_limits


def test_gpu_config_is_the_authors_planner() -> None:
    cfg = load_planner_config("gpu", "go2")
    assert (cfg.num_samples, cfg.num_policy_samples, cfg.iterations, cfg.elites) == (450, 22, 8, 64)
    assert (cfg.temperature, cfg.init_std, cfg.min_std, cfg.horizon, cfg.discount) == (
        0.25,
        2.0,
        0.05,
        25,
        0.99,
    )
    assert cfg.policy_std == 0.05 and not cfg.keep_elites and not cfg.compile


def test_cpu_config_inherits_what_it_does_not_change() -> None:
    go2, ur5e = load_planner_config("cpu", "go2"), load_planner_config("cpu", "ur5e")
    assert go2.discount == ur5e.discount == 0.99 and go2.min_std == 0.05  # from gpu.yaml, not repeated
    assert go2.num_samples < 450 and go2 != ur5e  # robot sections differ
    # nothing in cpu.yaml repeats a value of gpu.yaml: a setting lives in one file
    from simdist.paths import config_dir

    parent = yaml.safe_load((config_dir() / "planner" / "gpu.yaml").read_text())
    child = yaml.safe_load((config_dir() / "planner" / "cpu.yaml").read_text())
    repeated = [k for k, v in child.items() if k in parent and parent[k] == v]
    assert repeated == []


def write(folder, name: str, text: str) -> None:
    (folder / "planner").mkdir(exist_ok=True)
    (folder / "planner" / f"{name}.yaml").write_text(text)


def test_merge_order_overrides_and_strict_keys(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    base = (
        "num_samples: 10\nnum_policy_samples: 2\npolicy_std: 0.05\niterations: 3\nelites: 4\ntemperature: 0.5\n"
        "init_std: 1.0\nmin_std: 0.1\nhorizon: 5\ndiscount: 0.9\nrobots:\n  arm: {iterations: 4}\n"
    )
    write(tmp_path, "base", base)
    write(tmp_path, "child", "extends: base\nelites: 5\nrobots:\n  arm: {elites: 6}\n")
    assert load_planner_config("child", "legs").elites == 5
    arm = load_planner_config("child", "arm")
    assert (arm.iterations, arm.elites) == (4, 6)
    assert load_planner_config("child", "arm", {"compile": True, "iterations": 7}).iterations == 7
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        load_planner_config("child", "arm", {"bogus": 1})
    write(tmp_path, "typo", "extends: base\nrobots:\n  arm: {iteratons: 4}\n")
    with pytest.raises(ConfigError, match="iteratons"):
        load_planner_config("typo", "arm")
    write(tmp_path, "loop", "extends: loop\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_planner_config("loop", "arm")
    write(tmp_path, "bad", "extends: base\nelites: 11\n")
    with pytest.raises(ConfigError, match="elites"):
        load_planner_config("bad", "arm")
    with pytest.raises(ConfigError, match="unknown planner 'nope'"):
        load_planner_config("nope", "arm")
    with pytest.raises(ConfigError, match="expected integer"):
        load_planner_config("base", "arm", {"iterations": 2.5})


def test_task_action_limits() -> None:
    from simdist.sim.config import load_task

    assert task_action_limits(load_task("go2_slope")) == ActionLimits(-4.0, 4.0, 1.0)
    assert task_action_limits(load_task("ur5e_peg", {"action_max_delta": 0.2})).max_delta == 0.2
    limits = task_action_limits({"robot": "ur5e", "action_clip": 1.0, "action_max_delta": 0.2})
    assert limits == ActionLimits(-1.0, 1.0, 0.2)
    assert task_action_limits({"robot": "other"}) == ActionLimits(None, None, None)
